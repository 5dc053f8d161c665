"""atheris harness: the gguf target of :mod:`targets` (see :mod:`harness`)."""

from harness import main

if __name__ == "__main__":
    main("gguf")
