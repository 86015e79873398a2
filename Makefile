# Every target creates .venv and installs the package (with dev tools) when needed, so a fresh
# clone with only Python 3.11 works: `make demo`, `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LIGHT = $(shell $(BIN)/python -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data/light'))")

.PHONY: demo test lint bench fuzz clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/partition solve $(LIGHT)/light_resnet50.onnx --cluster hetero-2h100-4a100-2l4 --stages 4 -o demo-placement.json --force
	$(BIN)/partition evaluate $(LIGHT)/light_resnet50.onnx --cluster hetero-2h100-4a100-2l4 demo-placement.json --quiet

# One worker per usable core (pytest-xdist): serial, the suite takes 8 of CI's 10 minutes on 2 cores.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto

# Thousands of generated instances through every solver, the loaders fuzzed, the chain and
# two-tower bounds against brute force on hundreds of small graphs and against ideal-dp's and
# cp-sat's placements on larger ones, for a bounded time; one worker per usable core (14 minutes on 2).
fuzz: $(STAMP)
	PARTITION_PROPERTY_EXAMPLES=2000 PARTITION_FUZZ_EXAMPLES=3000 PARTITION_BOUND_EXAMPLES=200 \
		PARTITION_TOWER_EXAMPLES=900 PARTITION_LARGER_BOUND_EXAMPLES=60 PARTITION_LARGER_TOWER_EXAMPLES=60 \
		timeout 2700 \
		$(BIN)/python -m pytest -n auto tests/test_properties.py tests/test_fuzz_loaders.py tests/test_chain_bound.py \
		tests/test_tower_bound.py::test_never_above_the_optimum_on_two_towers \
		tests/test_tower_bound.py::test_never_above_the_solvers_placements_on_larger_towers -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The standard subset (instances/standard.txt: 32 instances over all 7 clusters) with every
# registered solver, then the large-graph cases (bench/scale.py: the 110k-op MoE at k = 64 and
# the 7B decoder at k = 8, 16, 32, one process each); sized for < 20 minutes on 2 cores.
# Writes bench-results/summary.md and bench-results/scale.txt.
BENCH_TIME_LIMIT ?= 10
bench: $(STAMP)
	$(BIN)/partition bench @instances/standard.txt --time-limit $(BENCH_TIME_LIMIT) --jobs 2 -o bench-results --force
	$(BIN)/python bench/scale.py | tee bench-results/scale.txt

clean:
	rm -rf $(VENV) demo-placement.json bench-results
