"""atheris harness: the safetensors target of :mod:`targets` (see :mod:`harness`)."""

from harness import main

if __name__ == "__main__":
    main("safetensors")
