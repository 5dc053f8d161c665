# The two entry points of the README. Both set everything up first.
.PHONY: run test setup
setup:
	bash scripts/setup.sh
run: setup
	.venv/bin/rlx demo
test:
	bash scripts/test.sh
