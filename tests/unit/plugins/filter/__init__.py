# Makes this folder a package, so pytest imports its tests as filter.test_<name>: test_bench_report.py,
# test_diagnose_redact.py and test_wheel_plan.py share their base names with tests of
# tests/unit/plugins/module_utils, which pytest's default import mode (prepend) would refuse as a clash.
