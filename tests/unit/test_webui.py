"""The web playground's serving (no model): GET / and its files, --no-webui, API keys, package data.

The page itself is tested in a real browser against the real server: tests/integration/test_webui.py.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import tomllib
from pathlib import Path

from skippy.http.app import AppState, create_app
from skippy.http.settings import ServerSettings
from skippy.http.webui import CSP, assets

ROOT = Path(__file__).resolve().parents[2]
WEBUI = ROOT / "skippy" / "http" / "webui"
KEY = "sk-test-key"
#: what Chromium sends for a page: the playground answers it; other clients get Ollama's text (test_ollama_models)
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def client(**settings):
    return create_app(AppState(), ServerSettings(**settings)).test_client()


async def test_the_page_and_its_files_are_served_with_a_content_security_policy() -> None:
    c = client()
    page = await c.get("/", headers=BROWSER)
    assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.headers["Content-Security-Policy"] == CSP and "script-src 'self';" in CSP
    assert page.headers["Cache-Control"] == "no-cache"
    html = (await page.get_data()).decode()
    for ref in re.findall(r'(?:src|href)="(webui/[^"]+)"', html):
        resp = await c.get("/" + ref)
        assert resp.status_code == 200, ref
    js = await c.get("/webui/app.js")
    assert js.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert "./vendor/marked.esm.js" in (await js.get_data()).decode()
    assert (await c.get("/webui/vendor/purify.es.mjs")).status_code == 200
    again = await c.get("/webui/app.js", headers={"If-None-Match": js.headers["ETag"]})
    assert again.status_code == 304 and not await again.get_data()


async def test_only_the_packaged_files_are_served() -> None:
    c = client()
    for path in ("/webui/nope.js", "/webui/../app.py", "/webui/%2e%2e/webui.py", "/webui/vendor/../../webui.py",
                 "/webui/", "/index.html"):
        resp = await c.get(path)
        assert resp.status_code == 404, path
        assert "error" in await resp.get_json()
    assert not any(name.endswith(".py") for name in assets())


async def test_no_webui_answers_404_like_any_unknown_path() -> None:
    c = client(webui=False)
    resp = await c.get("/webui/app.js", headers=BROWSER)
    assert resp.status_code == 404
    assert (await resp.get_json())["error"]["message"] == "no route GET /webui/app.js"
    root = await c.get("/", headers=BROWSER)  # no page: Ollama's text, to a browser too
    assert root.status_code == 200 and (await root.get_data()) == b"Ollama is running"


async def test_the_page_needs_no_key_but_the_api_still_does() -> None:
    c = client(api_keys=(KEY,))
    assert (await c.get("/", headers=BROWSER)).headers["Content-Type"] == "text/html; charset=utf-8"
    assert (await c.get("/")).status_code == 200
    assert (await c.get("/webui/app.css")).status_code == 200
    assert (await c.get("/v1/models")).status_code == 401
    assert (await c.post("/")).status_code == 401  # only GET and HEAD of the page are public
    assert (await c.get("/webui/nope")).status_code == 404
    assert (await client(api_keys=(KEY,), webui=False).get("/webui/app.js")).status_code == 404  # --no-webui
    assert (await client(api_keys=(KEY,), webui=False).get("/")).status_code == 200  # Ollama's probe: public


def test_every_file_is_package_data_so_a_wheel_has_it() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["skippy.http"]
    files = [p.relative_to(WEBUI.parent).as_posix() for p in WEBUI.rglob("*") if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), files
    assert sorted(assets()) == sorted(p.relative_to(WEBUI).as_posix() for p in WEBUI.rglob("*") if p.is_file())


def test_vendored_libraries_match_their_recorded_versions_and_carry_their_licences() -> None:
    vendor = WEBUI / "vendor"
    rows = re.findall(r"^\| `([^`]+)` \| \[(\w+)\]\([^)]+\) \| ([\d.]+) \| .+\| `([0-9a-f]{64})` \|$",
                      (vendor / "VENDOR.md").read_text(), re.M)
    assert {name for name, *_ in rows} == {"marked.esm.js", "purify.es.mjs"}
    for name, package, version, digest in rows:
        data = (vendor / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
        assert version in data[:400].decode(), (name, version)  # the file's own banner names its version
        assert any(p.name.startswith(package) and "LICENSE" in p.name for p in vendor.iterdir()), package
