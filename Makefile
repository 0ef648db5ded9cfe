# rivet developer tasks. Every target that runs Python first makes sure .venv is installed.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.rivet-installed
PYTEST_ARGS ?=
NOX_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv test test-matrix pytest lint docs docs-serve settings-docs demo bench scale screenshots mutation clean distclean

help:
	@echo "make venv   create .venv: rivet with every extra, and the dev dependency group"
	@echo "make test   find or start PostgreSQL, run pytest against it, then lint and build the docs"
	@echo "make test-matrix  the suite on every supported Python + Django, fresh venv each"
	@echo "make lint   ruff check, ruff format --check, mypy rivet/, the migration check"
	@echo "make docs   build the documentation site with mkdocs --strict (into a temp folder)"
	@echo "make settings-docs  redraw the settings tables of docs/ from rivet/settings_table.py"
	@echo "make docs-serve  serve the documentation site with live reload (DOCS_ADDR, default $(DOCS_ADDR))"
	@echo "make demo   run the demo on SQLite files in demo/"
	@echo "make bench  the benchmark: bench/results.md, results.json, throughput.png (BENCH_SOAK, BENCH_PREFETCH, BENCH_ARGS)"
	@echo "make scale  the scale study: bench/scale.md, scale.json, docs/img/scaling.png (SCALE_ARGS)"
	@echo "make screenshots  the admin's browser tests, saving their screenshots into docs/img/"
	@echo "make mutation  each guard of each SQL store removed in turn: conformance + 3 chaos seeds"
	@echo "make clean  remove caches, build output and demo/ (distclean: .venv too)"

venv: $(STAMP)

# rivet with every published extra, and the repository's own tools from pyproject's dependency
# groups (PEP 735), which pip reads from 25.1 on: an older pip in the new venv is upgraded first.
# Re-installs only when pyproject.toml is newer than the stamp.
DEV_INSTALL := -e '.[binary,pool,api,metrics,otel]' --group dev
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --disable-pip-version-check -q 'pip>=25.1'
	$(VPY) -m pip install --disable-pip-version-check $(DEV_INSTALL)
	touch $(STAMP)

# scripts/find_chromium.py finds the browser the admin's browser tests drive (installing
# Debian's chromium when root with apt-get, else stopping with how to get one);
# scripts/find_promtool.py does the same for promtool (Debian's prometheus), which checks
# and unit-tests the Prometheus rules rivet ships.
# scripts/find_pgbouncer.py does the same for pgbouncer (Debian's pgbouncer): the PgBouncer
# tests start it in front of the test server, in transaction and in session pooling.
# scripts/find_patroni.py does the same for patroni and etcd (Debian's patroni and etcd-server):
# the Patroni failover test runs a two-node synchronous cluster with them.
# scripts/find_locales.py makes sure de_DE.UTF-8 exists (installing Debian's locales-all when
# root with apt-get, else stopping with how to get it): the non-English-server test needs it.
# scripts/find_postgres.py chooses the server (DATABASE_URL, .env, Docker, or a throwaway
# initdb cluster), exports DATABASE_URL and EFFECT_DATABASE_URL, and stops what it started.
# scripts/build_docs.py builds the documentation site with mkdocs build --strict into a temporary
# folder: a broken link or anchor, or a stale mkdocstrings reference, fails the run.
# scripts/tree_unchanged.py fails the run when the suite left the checkout other than it found it.
# scripts/suite_record.py records a passed whole suite (its Python, Django and tree) in .venv/:
# the matrix cell of those same versions (CI's py3.11-django5.2) then does not run it again.
test: venv
	$(VPY) scripts/find_chromium.py >/dev/null
	$(VPY) scripts/tree_unchanged.py snapshot
	$(VPY) scripts/suite_record.py start
	$(VPY) scripts/find_promtool.py >/dev/null
	$(VPY) scripts/find_locales.py >/dev/null
	$(VPY) scripts/find_pgbouncer.py >/dev/null
	$(VPY) scripts/find_patroni.py >/dev/null
	$(VPY) scripts/find_postgres.py run -- $(VPY) -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory lint
	$(VPY) scripts/build_docs.py
	$(VPY) scripts/tree_unchanged.py check
	$(VPY) scripts/suite_record.py passed

# Every supported Python + Django pair (noxfile.py), each in a fresh virtualenv under .nox/, on
# databases named after the cell. nox comes with the test extras; a missing interpreter fails.
test-matrix: venv
	$(VENV)/bin/nox $(NOX_ARGS)

# The browser tests with their screenshots kept in docs/img/ (make test keeps them in a temp folder).
screenshots: venv
	$(VPY) scripts/find_chromium.py >/dev/null
	RIVET_SCREENSHOT_DIR=$(CURDIR)/docs/img $(VPY) scripts/find_postgres.py run -- \
		$(VPY) -m pytest -q tests/acceptance/test_admin_browser.py

# pytest against whatever DATABASE_URL says, without discovery.
pytest: venv
	$(VPY) -m pytest $(PYTEST_ARGS)

# The migration check is the suite's own test (both projects' makemigrations --check, on an
# in-memory SQLite database: no server needed).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	EFFECT_DATABASE_URL=sqlite://:memory: DATABASE_URL=sqlite://:memory: $(VENV)/bin/mypy
	$(VPY) -m pytest -q -p no:cacheprovider tests/unit/test_migrations.py

# The documentation site (mkdocs.yml). docs builds it the way make test does; docs-serve rebuilds
# it on every change (mkdocs serve builds into a temporary folder too). The OpenAPI schema is
# generated by scripts/mkdocs_hooks.py at each build, never written into the checkout.
DOCS_ADDR ?= 127.0.0.1:8001
docs: venv
	$(VPY) scripts/build_docs.py

# The settings tables of docs/reference/settings.md and docs/workers.md are drawn from
# rivet/settings_table.py; a stale one fails tests/unit/test_settings_table.py and the docs build.
settings-docs: venv
	$(VPY) scripts/settings_docs.py --write

docs-serve: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr $(DOCS_ADDR)

# The demo starts from empty files each time: its evidence is about this run only.
demo: venv
	rm -rf demo && mkdir -p demo
	DATABASE_URL=sqlite:///$(CURDIR)/demo/rivet.sqlite3 \
	EFFECT_DATABASE_URL=sqlite:///$(CURDIR)/demo/effect.sqlite3 \
		$(VPY) manage.py rivet_demo

# The whole benchmark in one run (docs/benchmarking.md): the full-backlog grid with its
# ceiling, the offered load, a soak of BENCH_SOAK tasks and the enqueue figures, on the server
# scripts/find_postgres.py finds (as for make test). Workers run with --prefetch BENCH_PREFETCH
# (auto, the worker's default: no flag is passed; 0 claims only into free slots). BENCH_ARGS adds
# or overrides flags.
BENCH_SOAK ?= 500000
BENCH_PREFETCH ?= auto
BENCH_ARGS ?=
bench: venv
	$(VPY) scripts/find_postgres.py run -- \
		$(VPY) manage.py rivet_chaos bench --soak $(BENCH_SOAK) --prefetch $(BENCH_PREFETCH) $(BENCH_ARGS)

# The scale study (docs/scaling.md): 1 to 64 real worker processes, directly and through
# PgBouncer in transaction pooling (scripts/find_pgbouncer.py installs it), then the enqueue's
# commit rate with synchronous_commit on and off beside pg_test_fsync; about 8 minutes. 64 direct
# workers hold up to 256 server connections: the server needs max_connections above that (the
# command refuses before starting otherwise). SCALE_ARGS adds or overrides flags.
SCALE_ARGS ?=
scale: venv
	$(VPY) scripts/find_pgbouncer.py >/dev/null
	$(VPY) scripts/find_postgres.py run -- $(VPY) manage.py rivet_scale $(SCALE_ARGS)

# The mutation matrix (docs/chaos.md): each mutant in tests/mutation removes one guard of a SQL
# store; it must fail the conformance suite and (PostgreSQL) the chaos verdict of a quick run on
# each of MUTATION_SEEDS. Prints the table; exit 1 names any mutant that was not caught.
MUTATION_SEEDS ?= 1,2,3
MUTATION_ARGS ?=
mutation: venv
	$(VPY) scripts/find_postgres.py run -- \
		$(VPY) -m tests.mutation.matrix --seeds $(MUTATION_SEEDS) $(MUTATION_ARGS)

clean:
	rm -rf demo build dist .pytest_cache .ruff_cache .nox *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
