#!/usr/bin/env python3
"""Turns a `bazel test` log into per-test-case counts.

Usage: count_test_results.py BAZEL_TEST_LOG BAZEL_TESTLOGS_DIR
           [--run NAME BAZEL_TEST_LOG BAZEL_TESTLOGS_DIR ...] [CHECK=pass|fail ...]

For every test target named in the log's summary, counts the test cases in its JUnit
XML (bazel-testlogs/<package>/<name>/test.xml). A failed target with no readable test
cases (crash, timeout, build failure) counts as one failure. Each --run adds another
`bazel test` of the same tree (e.g. under a sanitizer, in an output base of its own),
its cases counted the same way and its failures printed with NAME. Each extra
CHECK=result argument (e.g. the CUDA compile check) counts as one case. Prints each
failure and ends with 'N passed, N failed'; exits 1 when anything failed.
"""
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

SUMMARY = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD|INCOMPLETE)")


def cases_of(xml_path):
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    results = []
    for case in root.iter("testcase"):
        bad = case.find("failure") is not None or case.find("error") is not None
        results.append((f"{case.get('classname')}.{case.get('name')}", not bad))
    return results


def count_run(log, testlogs, label):
    """(passed, failed) over one `bazel test` log, printing each failure."""
    passed = failed = 0
    for line in open(log, errors="replace"):
        match = SUMMARY.match(line.strip())
        if not match:
            continue
        target, status = match.groups()
        package, name = target[2:].split(":")
        cases = cases_of(testlogs / package / name / "test.xml")
        if not cases:
            ok = status in ("PASSED", "FLAKY")
            passed += ok
            failed += not ok
            if not ok:
                print(f"FAILED {label}{target} ({status})")
            continue
        for case, ok in cases:
            passed += ok
            failed += not ok
            if not ok:
                print(f"FAILED {label}{target} {case}")
        if status not in ("PASSED", "FLAKY") and all(ok for _, ok in cases):
            failed += 1
            print(f"FAILED {label}{target} ({status} after its test cases passed)")
    return passed, failed


def main():
    args = sys.argv[1:]
    runs = [("", args[0], pathlib.Path(args[1]))]
    args = args[2:]
    while args and args[0] == "--run":
        name, log, testlogs = args[1:4]
        runs.append((f"[{name}] ", log, pathlib.Path(testlogs)))
        args = args[4:]
    passed = failed = 0
    for label, log, testlogs in runs:
        run_passed, run_failed = count_run(log, testlogs, label)
        passed += run_passed
        failed += run_failed
    for check in args:
        name, result = check.split("=", 1)
        ok = result == "pass"
        passed += ok
        failed += not ok
        if not ok:
            print(f"FAILED {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
