from rlx.eval.cli import main

main()
