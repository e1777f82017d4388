"""`python -m oncelog`: the `oncelog` command."""

from oncelog.cli import main

if __name__ == "__main__":
    main()
