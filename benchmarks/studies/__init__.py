"""Study scripts: numbers for the docs from synthetic data (not library code; nothing in rlx imports them)."""
