#!/usr/bin/env python3
"""Turns a `bazel test` log into per-test-case counts.

Usage: count_test_results.py BAZEL_TEST_LOG BAZEL_TESTLOGS_DIR [CHECK=pass|fail ...]

For every test target named in the log's summary, counts the test cases in its JUnit
XML (bazel-testlogs/<package>/<name>/test.xml). A failed target with no readable test
cases (crash, timeout, build failure) counts as one failure. Each extra CHECK=result
argument (e.g. the CUDA compile check) counts as one case. Prints each failure and
ends with 'N passed, N failed'; exits 1 when anything failed.
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


def main():
    log, testlogs = sys.argv[1], pathlib.Path(sys.argv[2])
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
                print(f"FAILED {target} ({status})")
            continue
        for case, ok in cases:
            passed += ok
            failed += not ok
            if not ok:
                print(f"FAILED {target} {case}")
        if status not in ("PASSED", "FLAKY") and all(ok for _, ok in cases):
            failed += 1
            print(f"FAILED {target} ({status} after its test cases passed)")
    for check in sys.argv[3:]:
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
