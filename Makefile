# The two entry points of the README. Both set everything up first.
.PHONY: run test setup sanitize
setup:
	bash scripts/setup.sh
run: setup
	.venv/bin/rlx generate smollm2 -p "The capital of France is" -n 32
test:
	bash scripts/test.sh
# Metal kernel tests (msl-sim) under ThreadSanitizer and AddressSanitizer.
sanitize:
	bash scripts/sanitize.sh
