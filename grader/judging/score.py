"""Scoring: run the hidden tests for one submission and turn them into a SubmissionResult.

SECRET: this module (and what it imports: the reference, the rubric, the bug catalogue)
must never be loaded in a process that forks student code (docs/architecture.md).

grade_submission runs the lesson's hidden tests (tests/test_<part>.py in its folder) with a tiny
in-process runner (no pytest start-up per submission): each `test_*` function gets the fixtures
`student` (the adapter over the submission's transport) and `reference` (the adapter over the
lesson's reference, shared and cached across the batch). Points, titles and hints come from the
lesson's rubric.toml.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from grader.judging import integrity
from grader.judging import source_scan as scan
from grader.judging.assertions import STAGE_WORDS, GradeFailure, error_words
from grader.intake.submissions import contract_module_source
from grader.results.records import LENT_FACT, SubmissionResult, TestResult
from grader.running import forbidden
from grader.running.calls import Adapter, InProcessTransport
from grader.sandbox import lending

ROOT = Path(__file__).resolve().parents[2]


def reference_adapter(*, lesson) -> Adapter:
    """The reference, in this process, with results cached by call (the lesson's `reference`)."""
    return lesson.reference


# -- forbidden APIs: the static layer ----------------------------------------------------------
def _generated_modules(lesson) -> dict[str, str]:
    """The contract modules the intake writes around a notebook's cells (the kit's text, not the student's)."""
    return {f"{module}.py": contract_module_source("", module, lesson=lesson) for module in lesson.modules}


def _kit_sources(lesson) -> dict[str, bytes]:
    """The release's own .py files (grader/release/student_release.py, `shipped_sources`), which a repository
    handed in holds unchanged: not the student's, so never read or flagged."""
    from grader.release.student_release import shipped_sources

    return shipped_sources(lesson=lesson)


def _kit_history(lesson) -> dict[str, frozenset]:
    """Every version of those files a release has shipped, by path (student_release.shipped_history)."""
    from grader.release.student_release import shipped_history

    return shipped_history(lesson=lesson)


def scan_submission(directory: Path, *, lesson) -> scan.Findings:
    """What the static scan finds in a submission's source (grader/judging/source_scan.py), parsed in this process:
    for trusted code, and for tests; a grading run scans in a limited helper (`limited_scan`)."""
    kit = _kit_sources(lesson)
    sources, found = scan.snapshot(Path(directory), lesson.notebook_module, _generated_modules(lesson), kit,
                                   _kit_history(lesson))
    found.merge(scan.scan_sources([(name, data, scan.read_cells(data) if cells else None)
                                   for name, data, cells in sources], lesson.forbidden_policy, lesson.contract_file_of,
                                  kit=list(kit)))
    return found


def limited_scan(*, lesson, **limits) -> scan.LimitedScan:
    """The lesson's scan in a limited helper process (`limits`: memory_bytes, seconds, budget; the
    lesson's limits.toml [scan])."""
    return scan.LimitedScan(policy=lesson.forbidden_policy, contract=lesson.contract_file_of,
                            notebook_module=lesson.notebook_module, generated=_generated_modules(lesson),
                            kit=_kit_sources(lesson), earlier=_kit_history(lesson), **limits)


def static_forbidden(directory: Path, *, lesson) -> dict[str, set[str]]:
    """file name -> library attention (or kit code) its source reaches."""
    return scan_submission(directory, lesson=lesson).costs


def _forbidden_by_component(runtime: dict[str, set], static: dict[str, set], file_of: dict[str, str]) -> dict[str, set]:
    """Who pays for a forbidden API: the part whose file names it, and the part whose test ran it.

    Run-time sightings (a call that met library attention, switched off in the child) are precise
    because each part runs against the grader's stand-ins for the other parts (grader/running/executor.py),
    so a block never runs the student's multihead.
    """
    return {c: set(static.get(file_of[c], ())) | set(runtime.get(c, ())) for c in file_of}


# -- a crash in a function costs only that function's tests -------------------------------------
class OverStandIns:
    """A submission's transport that asks a call again, over the grader's stand-in, when it failed
    inside another graded name of its module (grader/running/executor.py marks the error `inside`): a crash
    in scaled_dot_product_attention then costs its own tests, and SelfAttention is graded over the
    stand-in, as it is judged against the student's own function when that gives wrong numbers.
    A session (one instance, its methods called in order) is asked again when one of its steps failed
    so. Only a better answer replaces the first one: a call's without an error, a session's that was built
    and ran more of its steps to a value; library attention is never retried (it costs the whole part anyway)."""

    def __init__(self, transport, standin_names: dict, allowed=None):
        self.transport = transport
        self.standin_names = standin_names  # the lesson's: stand-in module -> {contract name: stand-in name}
        # (module, called, name) -> whether a call of `called` may be graded over the stand-in of `name`
        # (grader/sandbox/lending.py Lending.over_allowed: only a caller over its callee's)
        self.allowed = allowed

    def call(self, header: dict, arrays: dict) -> tuple[dict, dict]:
        return self.call_many([(header, arrays)])[0]

    def call_many(self, calls: list) -> list:
        answers = self._send(calls)
        again = [(i, (retry, calls[i][1])) for i, ((header, _), (answer, _)) in enumerate(zip(calls, answers))
                 if (retry := _retry_over_standins(header, answer, self.standin_names, self.allowed)) is not None]
        if again:
            for (i, _), answer in zip(again, self._send([call for _, call in again])):
                if _better(answer[0], answers[i][0]):
                    answers[i] = answer
        return answers

    def _send(self, calls: list) -> list:
        call_many = getattr(self.transport, "call_many", None)
        return call_many(calls) if call_many else [self.transport.call(h, a) for h, a in calls]

    def __getattr__(self, name):
        return getattr(self.transport, name)


def _retry_over_standins(header, answer, standin_names: dict, allowed=None) -> dict | None:
    """The call asked again over the stand-ins of the graded names its error (or a session step's) was raised
    inside, or None. Where the error was raised is the child's word, so `allowed` (the lesson's lending) decides
    which of them a call may be graded over, whatever the child says."""
    if not isinstance(header, dict) or header.get("over_standins") or not isinstance(answer, dict):
        return None
    steps = answer.get("steps") if header.get("op") == "session" else None
    errors = [answer.get("error"), *(a.get("error") for a in steps if isinstance(a, dict))] \
        if isinstance(steps, list) else [answer.get("error")]
    declared = standin_names.get(header.get("module"), {})
    called = header.get("name") or header.get("cls")
    names = set()
    for error in errors:
        inside = error.get("inside") if isinstance(error, dict) else None
        if isinstance(inside, list) and forbidden.MARK not in str(error.get("message", "")):
            names |= {n for n in inside if isinstance(n, str) and n in declared and n != called
                      and (allowed is None or allowed(header.get("module"), called, n))}
    return dict(header, over_standins=sorted(names)) if names else None


def _better(again, first) -> bool:
    """Whether the answer over the stand-ins replaces the first: it has no error of its own and, for a session,
    more of its steps answered with a value than the first had."""
    if not isinstance(again, dict) or again.get("error"):
        return False
    valued = lambda answer: sum(1 for a in answer.get("steps") or () if isinstance(a, dict) and "value" in a)  # noqa: E731
    return "steps" not in again or not isinstance(first, dict) or first.get("error") or valued(again) > valued(first)


def _caller(call) -> str | None:
    header = call.header if isinstance(call.header, dict) else {}
    caller = header.get("cls") or header.get("name")
    return caller if isinstance(caller, str) else None


def _over(call) -> list:
    """The graded names a call was answered over the grader's stand-ins of (OverStandIns), or []."""
    names = call.result.header.get("over_standins") if isinstance(call.result.header, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _standin_notes(calls, failed=frozenset()) -> list[str]:
    """One note per graded name that was graded over a stand-in, naming the function that raised: its calls
    answered over the stand-in cost only that function's tests. The caller's other calls ran on the student's
    own function, raising or not; the failed tests (`failed`: rubric ids) among which such calls were are named,
    since what the function got wrong without raising may have cost them too."""
    seen: dict[str, set] = {}
    for c in calls:
        if (names := _over(c)) and (caller := _caller(c)):
            seen.setdefault(caller, set()).update(names)
    notes = []
    for caller, names in seen.items():
        named = ", ".join(sorted(names))
        also = list(dict.fromkeys(c.test for c in calls if _caller(c) == caller and not _over(c) and c.test in failed))
        note = (f"{caller} was graded over the grader's {named} in the calls where yours raised an error while "
                f"{caller} ran: those errors cost only the tests of {named} (shown there)")
        if also:
            note += (f"; in its other calls {caller} ran on yours, so what yours gets wrong without raising can cost "
                     f"its tests too: {', '.join(also)} failed")
        notes.append(note)
    return notes


def _lent_facts(outcomes, lesson, worded) -> dict[str, list[dict]]:
    """Part -> what the student's own version of a part it is always graded over the stand-in of (the lesson's
    [always_standin]) was shown to do in this grading: each fact a failed test of that part found, in a test that
    called one graded name only, a name the stand-in lends the part (the one it imports from there, when the
    lesson's [sibling_imports] names it). Only the facts the lesson words as LENT_FACT + id (`worded`: its
    [facts] ids), each with `graded_with` (the name), `see` (the part whose tests show it) and `file` (the
    part's own file) besides its own parameters."""
    wanted = {k.removeprefix(LENT_FACT) for k in worded if isinstance(k, str) and k.startswith(LENT_FACT)}
    if not wanted:
        return {}
    shown = defaultdict(list)  # part -> (the one name its failed test called, fact)
    for component, _, failure, calls in outcomes:
        names = {_caller(c) for c in calls}
        if failure is None or len(names) != 1 or None in names:
            continue
        shown[component] += [(next(iter(names)), f) for f in failure.facts
                             if isinstance(f, dict) and f.get("id") in wanted]
    found: dict[str, list[dict]] = {}
    for module, deps in lesson.always_standin.items():
        for dep in deps:
            lent = set(lesson.standin_names.get(dep, {}))
            sibling = lesson.sibling_imports.get(module)
            if sibling and sibling[0] == dep:
                lent &= {sibling[1]}
            for name, fact in shown.get(dep, ()):
                said = {**fact, "id": LENT_FACT + fact["id"], "graded_with": name, "see": dep,
                        "file": lesson.file_of.get(module, f"{module}.py")}
                if name in lent and said not in found.setdefault(module, []):
                    found[module].append(said)
    return found


# -- grading ----------------------------------------------------------------------------------
# Calls of each passed hidden test asked once more (Adapter.ask_again): each is a call more for the
# submission's child (a test asks 1 to 26), so all of them would double its work.
ASKED_AGAIN = 1


def grade_submission(*, name: str, directory: Path, transport, lesson, check_deliverables=None,
                     tests=None, findings: scan.Findings | None = None, seed: int = 0) -> SubmissionResult:
    """Grade one submission whose code `transport` executes; deterministic for a given submission.

    `check_deliverables(directory)` replaces grader.judging.deliverables.run_checks (a grading run passes one
    that runs the checks in a limited process, grader/running/deliverables_process.py). `tests` (rubric ids) grades those
    hidden tests only, and no deliverables (an nbgrader cell grades one test: grade_in_process).
    `findings`: the static scan of the submission as handed in (a grading run scans it in a limited
    helper before any student code runs); without it, `directory` is scanned here, first.
    `lesson`: the lesson value (its rubric, hidden tests, reference and catalogue). `seed`: the run's
    (grader/running/run_seed.py): the hidden tests' probe inputs and the order their calls are sent in."""
    found = findings if findings is not None else scan_submission(Path(directory), lesson=lesson)
    file_of, catalogue = lesson.file_of, lesson.catalogue
    rubric = lesson.rubric()
    reference = lesson.reference
    student = lesson.adapter()(OverStandIns(transport, lesson.standin_names, lending.of_lesson(lesson).over_allowed),
                               record=True, batch=True, seed=seed)
    outcomes = []  # (component, test id, failure or None, calls)
    answered_again = []  # tests passed on the first answers and failed on the second
    runtime = defaultdict(set)
    waiting = None  # a passed test whose calls asked again go with the next test's batch
    for component, test_id, fn in lesson.hidden_tests:
        if tests is not None and f"{component}.{test_id}" not in tests:
            continue
        if waiting is not None and waiting.component != component:
            # The next part's calls may need stand-ins lent (grader/sandbox/lending.py) that a child answering
            # this part's calls must not hold: the calls asked again go alone, as the part's last batch.
            _judge_again(waiting, student, reference, outcomes, answered_again, runtime)
            waiting = None
        student.current_test = f"{component}.{test_id}"
        start = len(student.calls)
        failure = _judge(fn, student, reference)  # sends the calls `waiting` asks again too, among its own
        calls = student.calls[start:]
        if waiting is not None:
            _judge_again(waiting, student, reference, outcomes, answered_again, runtime)
            waiting = None
        for c in calls:
            runtime[component] |= set(c.result.forbidden)
        outcomes.append((component, test_id, failure, calls))
        if failure is None and calls:
            # Passed: some of its calls, drawn from the run's seed, are asked once more. An answer must depend
            # on the call alone; when one came back different (a submission that answers a call it recognises,
            # or only the first time), the test is judged again on the second answers. Honest noise within
            # the test's tolerance passes both times; answers alike bit for bit need no second judgement.
            waiting = _Waiting(len(outcomes) - 1, component, test_id, fn, student.queue_again(calls, ASKED_AGAIN))
    if waiting is not None:
        _judge_again(waiting, student, reference, outcomes, answered_again, runtime)

    passed_calls = defaultdict(list)  # a part's calls in the tests it passed: what rules a named mistake out
    for component, _, failure, calls in outcomes:
        if failure is None:
            passed_calls[component] += calls
    agrees = defaultdict(dict)  # per part: whether each mistake tried agrees with those calls
    blamed = _forbidden_by_component(runtime, {file_of[c]: found.reaching(file_of[c], file_of.values()) for c in lesson.modules},
                                     file_of)
    result = SubmissionResult(submission=name, flags=found.shown())
    lent = _lent_facts(outcomes, lesson, rubric.get("facts", {}))  # part -> facts about a part it is graded over
    import_errors = set()
    exits: list[tuple[str, dict]] = []  # (file, error) of calls a file's exit stopped: integrity flags
    crashes: dict[tuple, str] = {}  # one text per error, whichever test met it first
    for component, test_id, failure, calls in outcomes:
        entry = rubric.get(component, {}).get(test_id)
        if entry is None:
            continue  # a test without rubric points is not graded
        rid = f"{component}.{test_id}"
        title = entry.get("title", rid)
        points = float(entry.get("points", 0))
        for c in calls:
            err = c.result.error
            if err and err.get("stage") == "import" and "module" in c.header:
                import_errors.add(f"{c.header['module']}.py")
            if err and "module" in c.header and err.get("type") in ("SystemExit", "Crashed"):
                exits.append((f"{c.header['module']}.py", err))
        called = list(dict.fromkeys(n for c in calls if isinstance(c.header, dict)
                                    and isinstance(n := c.header.get("cls") or c.header.get("name"), str)))
        if blamed[component]:  # the rubric's forbidden_message words them when the files are written
            bug = catalogue.identify_forbidden(component, blamed[component])
            result.tests.append(TestResult(name=rid, component=component, score=0.0, max_score=points,
                                           status="failed", hint_id=bug, title=title,
                                           forbidden=sorted(blamed[component]), called=called))
            continue
        if failure is None:
            result.tests.append(TestResult(name=rid, component=component, score=points, max_score=points,
                                           status="passed", output="", title=title))
            continue
        unfinished = bool(failure.error and failure.error.get("type") == "NotImplementedError")
        bug = None if _is_import(failure) or unfinished else \
            catalogue.identify(component, rid, calls, passed_calls[component], agrees[component])
        hint = rubric.get("hints", {}).get(bug, {}).get("text") if bug else None
        if isinstance(failure.error, dict):
            # The student's code raised: every test this error stopped gets the same words, which the
            # feedback shows once, under the list of the tests it cost.
            text = crashes.setdefault(_crash_key(failure.error), _crash_text(failure.error))
        else:
            text = failure.message
        # What to say beyond the test's own words, as data (results/feedback.py `advice` words it): the
        # mistake is hint_id; a part not written, a file that does not import or code that raised each get
        # their sentence; a wrong answer no catalogued mistake names gets the rubric's words for what the
        # numbers show, the test's hint when one of its facts was found, else the handout section.
        if unfinished:
            said = "unfinished"
        elif hint:
            said = ""
        elif isinstance(failure.error, dict) and failure.error.get("stage") == "import":
            said = "import"
        elif isinstance(failure.error, dict) and failure.error.get("traceback"):
            said = "raised"
        elif isinstance(failure.error, dict):
            said = ""  # a timeout, a refused answer, a missing attribute: the message says what to do
        else:
            said = "numbers"
        result.tests.append(TestResult(name=rid, component=component, score=0.0, max_score=points,
                                       status="failed", output=text, hint_id=bug, title=title,
                                       facts=[] if hint or unfinished else [*failure.facts, *(
                                           lent.get(component, ()) if said != "import" else ())], advice=said,
                                       called=called))
        if not result.evidence and failure.evidence:
            result.evidence = {"test": rid, **failure.evidence}

    result.notes.extend(_standin_notes(student.calls, {t.name for t in result.tests if t.status != "passed"}))
    result.flags += [f for f in integrity.early_exits(exits) if f not in result.flags]
    if answered_again:
        result.flags.append(f"answered the same calls differently when they were asked again: "
                            f"{', '.join(answered_again)} passed on the first answers and failed on the second")
    if tests is None:
        result.tests.extend(_deliverables(Path(directory), lesson, check_deliverables))
    if import_errors:
        result.status = "import-error: " + ", ".join(sorted(import_errors))
        every = import_errors >= {f"{module}.py" for module in lesson.modules}
        # A notebook's modules are made of its code cells: the student handed in no such file.
        made = (Path(directory) / f"{lesson.notebook_module}.py").is_file()
        result.notes.append("could not import " + ", ".join(sorted(import_errors))
                            + (" (made of your notebook's code cells: the tests name the cell that failed)" if made else "")
                            + ("; no part's code could be graded" if every else
                               "; only the tests that need these files lost points"))
    return result


@dataclass
class _Waiting:
    """A test that passed, waiting for the answers to its calls asked again (Adapter.queue_again)."""

    index: int  # its place in the outcomes
    component: str
    test_id: str
    fn: object
    asked: object  # the AskedAgain


def _judge_again(waiting: _Waiting, student, reference, outcomes: list, answered_again: list, runtime) -> None:
    """Judge a passed test again on its calls' second answers when any differs (sending them now if no batch
    took them), and put its outcome in its place."""
    answers, changed = waiting.asked.result()
    if not changed:
        return
    rid = f"{waiting.component}.{waiting.test_id}"
    test, recorded = student.current_test, student.calls
    student.current_test, student.calls, student.replay = rid, [], answers  # its probes are drawn as the first time
    try:
        failure = _judge(waiting.fn, student, reference)
    finally:
        calls, student.calls = student.calls, recorded
        student.calls += calls
        student.current_test, student.replay = test, None
    for c in calls:
        runtime[waiting.component] |= set(c.result.forbidden)
    if failure is None:
        return
    answered_again.append(rid)
    if failure.error is None:
        failure.message = ("Asked some of this test's calls again, your code answered differently (an "
                           "answer must depend on the call alone), and its second answers fail the test:\n"
                           + failure.message)
    outcomes[waiting.index] = (waiting.component, waiting.test_id, failure, calls)


def _judge(fn, student, reference) -> GradeFailure | None:
    """Run one hidden test on the student's adapter: its failure, or None when it passed."""
    try:
        fn(student, reference)
    except GradeFailure as f:
        return f
    except Exception as exc:  # a hidden test tripping on a strange answer: the student gets the benefit of a clear reason
        return GradeFailure(f"the grader could not check this answer ({type(exc).__name__}: {exc}); "
                            "check the return types and shapes against the contract")
    finally:
        student.send()  # calls a test made but never read are answered too, for the catalogue's replay
    return None


def grade_in_process(directory: Path, name: str, tests=None, *, lesson) -> SubmissionResult:
    """Grade trusted code in this process, with the hidden-test machinery of `grade_submission` (no
    sandbox). For code the caller already runs in its own process: the reference's mutants
    (killrate), a notebook's hidden test cells under nbgrader (grader.hidden_cell.hidden_test)."""
    return grade_submission(name=name, directory=Path(directory), transport=InProcessTransport(directory, lesson=lesson),
                            lesson=lesson, check_deliverables=lambda _: [], tests=tests)


# What the executor was doing when the student's code raised (grader/running/executor.py's stages).
def _crash_key(error: dict) -> tuple:
    """One error, however many calls met it: the same exception at the same lines, with the same
    message but for its numbers (a shape error names each call's sizes)."""
    return (error.get("type"), error.get("stage"), _trace(error), re.sub(r"\d+", "#", str(error.get("message", ""))))


def _crash_text(error: dict) -> str:
    where = _step_words(error) or STAGE_WORDS.get(str(error.get("stage", "")), "running your code")
    text = error_words(error, where)
    trace = _trace(error)
    return text + (f"\n{trace}" if trace else "")


def _step_words(error: dict) -> str:
    """Where in a session (one instance built, then its methods called in order) the error came: the method
    and its place, counted from 1, as the executor's record names them; "" for an error of no step."""
    step = error.get("step")
    if not isinstance(step, dict) or type(step.get("index")) is not int:
        return ""
    of, method, attr = (str(step.get(k) or "")[:100] for k in ("of", "method", "attr"))
    of = of or "object"
    if method and error.get("stage") == "output":
        doing = f"reading what {method} of your {of} returned"
    elif method:
        doing = f"calling {method} on your {of}"
    elif attr:
        doing = f"reading the attribute {attr} of your {of}"
    else:
        doing = f"running a step on your {of}"
    return f"{doing} (step {step['index'] + 1}: the grader builds one {of} and makes its calls on it in order)"


def _trace(error: dict) -> str:
    """The error's traceback without the import machinery's frames, which say nothing to a student."""
    entries = re.split(r"\n(?=  File )", str(error.get("traceback") or ""))
    return "\n".join(e for e in entries if e.strip() and not e.startswith('  File "<frozen '))


def _is_import(failure: GradeFailure) -> bool:
    return bool(failure.error and failure.error.get("stage") == "import")


def _deliverables(directory: Path, lesson, run_checks=None) -> list[TestResult]:
    """The deliverables component: the lesson's checks, run by grader.judging.deliverables.run_checks."""
    rubric = lesson.rubric()
    if run_checks is None:
        from grader.judging import deliverables

        checks = lesson.deliverable_checks()
        run_checks = lambda folder: deliverables.run_checks(folder, checks)  # noqa: E731
    component = lesson.deliverables_component
    table = rubric.get(component, {})
    tests = []
    for check in run_checks(directory):
        entry = table.get(check.id)
        if entry is None:
            continue
        points = float(entry.get("points", 0))
        passed = bool(check.passed)
        tests.append(TestResult(name=f"{component}.{check.id}", component=component,
                                score=points if passed else 0.0, max_score=points,
                                status="passed" if passed else "failed",
                                output=str(check.message or "") if not passed else "",
                                title=entry.get("title", check.id), advice="" if passed else "hint"))
    return tests

