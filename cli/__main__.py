"""`python -m gpudoctor`: the same entry point as the console script."""
from gpudoctor.main import entry

if __name__ == "__main__":
    entry()
