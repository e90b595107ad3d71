"""A PNG of a report directory's report.html, rendered by headless Chromium: for reviewing how a
report reads (a merged one from `python -m harness report merge` included) without a desktop.

    python benchmarks/screenshot_report.py DIR OUT.png [--window-size 1400,2000] [--browser PATH]

It runs `chromium --headless --screenshot=OUT.png --window-size=1400,2000 file://DIR/report.html`
(plus --no-sandbox as root, which Chromium requires there, and a throwaway profile). The browser
is the first of chromium, chromium-browser, google-chrome found on PATH, or --browser; on Debian
or Ubuntu `apt-get install -y chromium` provides it. The page has no JavaScript and loads
nothing, so what the PNG shows is what a reader's browser shows at that window size (only the
window's height is captured: raise it for a long report).

Exit codes: 0 written; 1 the browser ran and wrote no PNG; 2 bad input (no report.html in DIR,
no browser, a malformed --window-size).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.layout.report_dir import ReportDir

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 120


def find_browser(given: str | None) -> str | None:
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def command(browser: str, page: Path, out: Path, window_size: str, profile: Path) -> list[str]:
    args = [
        browser,
        "--headless",
        f"--screenshot={out}",
        f"--window-size={window_size}",
        "--hide-scrollbars",
        "--disable-gpu",
        "--force-device-scale-factor=1",  # one PNG pixel per CSS pixel, whatever the display says
        f"--user-data-dir={profile}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox on
    return [*args, page.resolve().as_uri()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, metavar="DIR", help=f"a report dir (holds {ReportDir.REPORT_HTML})")
    parser.add_argument("out", type=Path, metavar="OUT.png")
    parser.add_argument("--window-size", default="1400,2000", metavar="W,H", help="default 1400,2000")
    parser.add_argument("--browser", default=None, help="the Chromium executable (default: found on PATH)")
    args = parser.parse_args(argv)
    page = ReportDir(args.dir).report_html
    if not page.is_file():
        print(f"error: {page}: no {page.name} there. Valid: a report dir of `python -m harness run` or "
              "`python -m harness report merge`. Fix: pass the directory the report was written to",
              file=sys.stderr)
        return 2
    width, _, height = args.window_size.partition(",")
    if not (width.isdigit() and height.isdigit()):
        print(f"error: --window-size {args.window_size!r}: not WIDTH,HEIGHT in pixels. Valid: e.g. "
              "1400,2000. Fix: give two whole numbers joined by a comma", file=sys.stderr)
        return 2
    browser = find_browser(args.browser)
    if browser is None:
        tried = [args.browser] if args.browser else list(BROWSERS)
        print(f"error: no headless browser: none of {', '.join(tried)} "
              "was found. Valid: a Chromium or Chrome executable. Fix: `apt-get install -y chromium` "
              "(Debian/Ubuntu), or pass --browser PATH", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.unlink(missing_ok=True)  # a stale PNG must not pass for this one
    with tempfile.TemporaryDirectory(prefix="screenshot-profile-") as profile:
        cmd = command(browser, page, args.out.resolve(), args.window_size, Path(profile))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            print(f"error: {browser} did not finish within {TIMEOUT_S} s", file=sys.stderr)
            return 1
    if not args.out.is_file() or args.out.stat().st_size == 0:
        print(f"error: {browser} exited {done.returncode} and wrote no {args.out}:\n{done.stderr[-2000:]}",
              file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) from {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
