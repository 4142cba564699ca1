"""The documentation's images, without a browser: every image a page shows is there, every
screenshot is shown by a page and taken by a browser test, and ``python3 tasks.py screenshots``
runs exactly the tests that take them (tests/jupyter_browser.py's ``shoot``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tasks
from tests.jupyter_browser import SCREENS, screen_difference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# MyST's image syntax, and the image and figure directives (```{image} PATH / :::{figure} PATH).
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DIRECTIVE = re.compile(r"^(?:```+|:::+)\s*\{(?:image|figure)\}\s+(\S+)", re.MULTILINE)


def pages() -> list[Path]:
    return [path for path in sorted(DOCS.rglob("*.md")) if "_build" not in path.parts]


def images_of(page: Path) -> list[tuple[str, Path]]:
    """The local images ``page`` shows: (as written, the file it names)."""
    text = page.read_text()
    found = []
    for written in [*IMAGE.findall(text), *DIRECTIVE.findall(text)]:
        if re.match(r"[a-z]+:", written):  # (a URL: not a file of the site)
            continue
        path = DOCS / written.lstrip("/") if written.startswith("/") else page.parent / written
        found.append((written, path.resolve()))
    return found


def shots_taken() -> dict[str, set[str]]:
    """{test file::test function: the names it passes to ``shoot``}, read from the sources."""
    taken: dict[str, set[str]] = {}
    for source in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(source.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for call in ast.walk(function):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "shoot"
                    and len(call.args) >= 2
                    and isinstance(call.args[1], ast.Constant)
                ):
                    key = f"tests/{source.name}::{function.name}"
                    taken.setdefault(key, set()).add(str(call.args[1].value))
    return taken


def test_every_image_a_page_shows_is_there() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {written}"
        for page in pages()
        for written, path in images_of(page)
        if not path.is_file()
    ]
    assert missing == []


def test_every_screenshot_is_shown_by_a_page_and_taken_by_a_test() -> None:
    shown = {path for page in pages() for _, path in images_of(page)}
    stored = {png.stem for png in SCREENS.glob("*.png")}
    assert stored, f"no screenshots in {SCREENS}"
    unshown = sorted(name for name in stored if (SCREENS / f"{name}.png") not in shown)
    assert unshown == [], f"no page shows these screenshots (delete them, or show them): {unshown}"
    taken = set().union(*shots_taken().values())
    assert stored == taken, "a test takes a shot that is not stored, or one stored is not taken"


def test_tasks_screenshots_runs_the_tests_that_take_them() -> None:
    listed = {test.split("[", 1)[0] for test in tasks.SCREENSHOT_TESTS}
    assert listed == set(shots_taken())
    assert tasks.SCREENS == SCREENS


def test_the_stored_screenshots_are_small_palette_pngs() -> None:
    from PIL import Image

    for png in sorted(SCREENS.glob("*.png")):
        with Image.open(png) as image:
            assert image.mode == "P", f"{png.name}: {image.mode}, not a palette"
        assert png.stat().st_size < 80_000, f"{png.name}: {png.stat().st_size} bytes"


def test_the_comparison_passes_a_few_words_and_fails_a_changed_picture() -> None:
    """What the browser tests do with a shot when they are not writing them."""
    import io

    from PIL import Image, ImageDraw

    stored = SCREENS / "approval-banner.png"

    def edited(*, box: tuple[int, int, int, int] | None = None, crop: int = 0) -> bytes:
        with Image.open(stored) as image:
            picture = image.convert("RGB")
        if box is not None:
            ImageDraw.Draw(picture).rectangle(box, fill="white")
        if crop:
            picture = picture.crop((0, 0, picture.width, picture.height - crop))
        out = io.BytesIO()
        picture.save(out, format="PNG")
        return out.getvalue()

    assert screen_difference(stored, stored.read_bytes()) is None
    with Image.open(stored) as image:
        width, height = image.size
    assert screen_difference(stored, edited(box=(100, 40, 160, 56))) is None  # (a word or two)
    buttons = edited(box=(width - 160, height // 2, width, height - 10))
    assert "squares differ" in (screen_difference(stored, buttons) or "")
    assert "height" in (screen_difference(stored, edited(crop=30)) or "")
