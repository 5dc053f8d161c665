"""atheris harness: the gguf_rows target of :mod:`targets` (see :mod:`harness`)."""

from harness import main

if __name__ == "__main__":
    main("gguf_rows")
