"""`python -m rlx.config` (console `rlx-config-keys`): every config key, its default and meaning."""

from rlx.config import main

main()
