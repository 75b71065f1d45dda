"""`python -m rlx.sweeps NAME [overrides...]`: run one paper table's sweep, then its report.
`python -m rlx.train -m --config-dir sweeps --config-name NAME` from any directory, the sweep directory fixed up
front (docs/sweeps.md); `--predictive` runs the arms in rounds (docs/predictive.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from rlx.sweeps.spec import available, sweep_dir_of, train_command


def _own_options_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with this launcher's own options moved before the sweep name: after it they would reach rlx.train."""
    takes_value = {s: a.nargs != 0 for a in parser._actions for s in a.option_strings}
    own, rest, i = [], [], 0
    while i < len(argv):
        key = argv[i].split("=", 1)[0]
        if key in takes_value:
            n = 2 if takes_value[key] and "=" not in argv[i] else 1
            own += argv[i: i + n]
            i += n
        else:
            rest.append(argv[i])
            i += 1
    return own + rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.sweeps", description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="a sweep: the stem of sweeps/<name>.yaml")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides for every job")
    parser.add_argument("--list", action="store_true", help="list the sweeps and exit")
    parser.add_argument("--no-report", action="store_true", help="do not run rlx.report at the end")
    pred = parser.add_argument_group("predictive schedule (docs/predictive.md)")
    pred.add_argument("--predictive", action="store_true",
                      help="run the arms in rounds of growing budget; stop those the fits rule out")
    pred.add_argument("--rounds", type=int, default=4, help="rounds at most (default 4)")
    pred.add_argument("--first-steps", type=int, default=0,
                      help="train.steps of round 0 (default: the sweep's train.steps / growth^(rounds-1))")
    pred.add_argument("--growth", type=int, default=2, help="budget factor per round (default 2: doubling)")
    pred.add_argument("--flat-rounds", type=int, default=3, help="consecutive flat fits that stop an arm (default 3)")
    pred.add_argument("--reach-alpha", type=float, default=0.001,
                      help="an arm the A intervals rule out stops only if a refit at the leader's A_lo - margin is "
                           "rejected at this level (default 0.001)")
    args = parser.parse_args(_own_options_first(parser, sys.argv[1:] if argv is None else list(argv)))
    sweeps = available()
    if args.list or not args.name:
        for name, doc in sweeps.items():
            print(f"{name:16s} {doc}")
        return 0
    if args.name not in sweeps:
        parser.error(f"unknown sweep {args.name!r}; choose one of {', '.join(sweeps)}")
    if args.predictive:
        from rlx.sweeps.rounds import RoundPlan, run_rounds  # the fits' scipy and the driver: only when asked for

        try:
            rc, sweep_dir = run_rounds(args.name, list(args.overrides), RoundPlan(
                args.rounds, args.first_steps, args.growth, args.flat_rounds, reach_alpha=args.reach_alpha))
        except ValueError as err:
            parser.error(str(err))
    else:
        sweep_dir, overrides = sweep_dir_of(args.name, list(args.overrides))
        cmd = train_command(args.name, overrides)
        print("+ " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
    if rc != 0:
        print(f"[sweep] rlx.train exited with {rc}", file=sys.stderr)
        return rc
    if args.no_report:
        print(f"[sweep] report: python -m rlx.report {sweep_dir}")
        return 0
    # the report is the next command, as a user would run it (rlx.report sits above rlx.sweeps: it reads the
    # sweep files)
    return subprocess.run([sys.executable, "-m", "rlx.report", str(sweep_dir)]).returncode

