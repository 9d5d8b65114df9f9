"""junit.xml through junitparser: one test case for the verdict (failed unless the run passed
or only its checks failed, which have their own cases) and one per check.

Every text and attribute goes through `harness.text.xml_safe`: junitparser writes with
xml.etree, which escapes markup but keeps the characters XML 1.0 forbids, so one control byte
quoted from the trainer's output made the whole file unreadable (to junitparser too)."""

from __future__ import annotations

from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

from harness import outcome
from harness.outcome import Kind
from harness.report.model import Report
from harness.text import xml_safe as x
from harness.vocab import CheckStatus


def render_junit(r: Report) -> str:
    name = x(r.env or "command")
    suite = TestSuite(x(f"harness-{r.run_id}"))
    v = r.verdict
    case = TestCase(f"verdict[{name}]", f"harness.{r.mode}", float(r.timings.run_s or 0.0))
    if v is not None:
        case.system_out = x("\n".join(v.evidence))
    # failed checks have their own cases: the verdict case fails for every other failure
    if v is None or (outcome.is_failure(v.kind) and v.kind != Kind.CHECK_FAILED):
        failure = Failure(x(v.summary) if v else "no verdict", v.kind if v else "incomplete")
        failure.text = v.kind if v else "incomplete"
        case.result = [failure]
    suite.add_testcase(case)
    for c in r.checks:
        cc = TestCase(x(f"check[{c.name}]"), f"harness.checks.{name}", 0.0)
        if c.status == CheckStatus.FAIL:
            failure = Failure(x(c.message or f"{c.name} failed"), "check-failed")
            failure.text = x(f"observed {c.observed}, bound {c.bound}")
            cc.result = [failure]
        elif c.status == CheckStatus.SKIP:
            cc.result = [Skipped(x(c.message or "skipped"))]
        suite.add_testcase(cc)
    suite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(suite)
    xml.update_statistics()
    return bytes(xml.tostring()).decode("utf-8")
