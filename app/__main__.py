"""`python -m app` is the same as the `moss-voice` console script."""

from app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
