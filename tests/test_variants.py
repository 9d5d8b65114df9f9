from pathlib import Path

import pytest

from harness import variants
from harness.config.pin import load_pin
from harness.errors import HarnessError

SOURCE = """\
#include <omp.h>
// env_start is mentioned in a comment: { not a body }
static void env_start(Env* envs, int n) {
    const char* s = "}{";  /* braces in strings do not count */
    #pragma omp parallel for \\
        schedule(static)
    for (int i = 0; i < n; i++) { reset(&envs[i]); }
}

void other(Env* envs, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) step(&envs[i]);
}

void* vec_thread_main(void* arg) {
    while (1) {
        #pragma omp parallel for num_threads(w)
        for (int i = 0; i < n; i++) step(&envs[i]);
    }
}
"""


def _tree(tmp_path: Path, text: str = SOURCE) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "vecenv.h").write_text(text)
    return tmp_path


def test_omp_free_neutralizes_exactly_the_named_functions(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    changes = variants.apply_transform(tree, variants.load_transform("omp-free"))
    out = (tree / "src" / "vecenv.h").read_text()
    assert len(changes) == 3  # env_start's pragma and its continuation, vec_thread_main's
    assert all(("env_start" in c) or ("vec_thread_main" in c) for c in changes)
    assert "\n#pragma omp parallel for\n    for (int i = 0; i < n; i++) step" in out  # other()
    assert out.count(variants.MARK) == 3
    survivors = [ln for ln in out.splitlines() if "#pragma omp" in ln and variants.MARK not in ln]
    assert survivors == ["#pragma omp parallel for"]  # only other()'s survives


def test_omp_free_fails_loudly_on_missing_function(tmp_path: Path) -> None:
    tree = _tree(tmp_path, SOURCE.replace("vec_thread_main", "worker_main"))
    with pytest.raises(HarnessError, match=r"vec_thread_main\(\) not found"):
        variants.apply_transform(tree, variants.load_transform("omp-free"))


def test_omp_free_fails_when_function_has_no_pragma(tmp_path: Path) -> None:
    text = SOURCE.replace("        #pragma omp parallel for num_threads(w)\n", "")
    tree = _tree(tmp_path, text)
    with pytest.raises(HarnessError, match="no OpenMP pragma in vec_thread_main"):
        variants.apply_transform(tree, variants.load_transform("omp-free"))


def test_function_body_skips_prototypes_and_calls() -> None:
    text = "void env_start(int);\nint main(){ env_start(1); }\nvoid env_start(int n) { x(); }\n"
    span = variants.function_body(text, "env_start")
    assert span is not None
    assert text[span[0] : span[1]] == "{ x(); }"


def test_parse_variant_aliases_and_combinations() -> None:
    pin = load_pin("replica")
    steps = variants.parse_variant("fixed+env:A=1", pin)
    assert [s.label() for s in steps] == [
        "omp-free:omp-free",
        "patch:fixes/replica-guards.patch",
        "env:A=1",
    ]
    assert variants.parse_variant("stock", pin) == []
    with pytest.raises(HarnessError, match="unknown variant 'nope'"):
        variants.parse_variant("nope", pin)


def test_pragma_inside_a_comment_is_left_alone(tmp_path: Path) -> None:
    text = SOURCE.replace(
        "    const char* s",
        "    /* was:\n    #pragma omp parallel for\n    */\n    const char* s",
    )
    tree = _tree(tmp_path, text)
    variants.apply_transform(tree, variants.load_transform("omp-free"))
    out = (tree / "src" / "vecenv.h").read_text()
    assert "/* was:\n    #pragma omp parallel for\n    */" in out  # the comment is intact
    assert out.count(variants.MARK) == 3
