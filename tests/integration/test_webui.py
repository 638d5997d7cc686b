"""The web playground in a real browser: Playwright drives the OS's Chromium against the real server.

No browser is downloaded: Chromium comes from the distribution's packages
(``apt-get install -y chromium``; ``.ci/run`` installs it when it is missing).
Every page must run without console errors or uncaught exceptions (checked
after each test). Requests the page sends are compared with requests sent
with httpx to the same server: both start from a cold prompt (a unique system
prompt, ``cache_prompt: false`` on the httpx side) so the numbers are computed
from the same batches and agree exactly.

The uncertainty view's screenshot is saved to ``tmp/artifacts/`` (or
``$SKIPPY_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.webui_policy import INJECTED
from tests.support import GEMMA, Server

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SKIPPY_TEST_ARTIFACTS", ROOT / "tmp" / "artifacts"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 300_000  # a generation on a busy 2-core machine; every wait below ends on a page event first
CONVERSATIONS = "skippy.conversations.v1"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"Chromium is not installed ({CHROMIUM}): install the OS package (apt-get install -y chromium); "
                    ".ci/run does it when it is missing")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Page:
    """A fresh browser context (empty local and session storage) on one page of ``base_url``, recording
    console errors, uncaught exceptions and the chat requests the page sends."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.base_url = base_url
        self.context = browser.new_context(viewport={"width": 1280, "height": 860})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.chat_bodies: list[dict[str, Any]] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("request", self._request)

    def _request(self, req: Any) -> None:
        if req.method == "POST" and req.url.endswith("/v1/chat/completions"):
            self.chat_bodies.append(json.loads(req.post_data))

    def open(self) -> Any:
        self.page.goto(self.base_url + "/")
        self.page.wait_for_function("() => document.querySelector('#model').value !== ''")  # /v1/models answered
        return self.page

    def set(self, field: str, value: Any) -> None:
        self.page.fill(f"#{field}", str(value))
        self.page.dispatch_event(f"#{field}", "change")

    def settings(self, *, system: str, temperature: float = 0, max_tokens: int = 48, seed: int | None = 7) -> None:
        self.page.fill("#system", system)
        self.set("temperature", temperature)
        self.set("max_tokens", max_tokens)
        self.set("seed", "" if seed is None else seed)

    def send(self, text: str) -> None:
        n = self.page.locator("article.msg.assistant").count()
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")
        self.page.wait_for_function(f"() => document.querySelectorAll('article.msg.assistant').length > {n}")

    def wait_done(self) -> None:
        self.page.wait_for_selector("#send:not([hidden])")
        self.page.wait_for_function("() => !document.querySelector('article.msg .live')")

    def stored(self) -> list[dict[str, Any]]:
        return json.loads(self.page.evaluate(f"localStorage.getItem('{CONVERSATIONS}')"))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def web(browser: Any, server: Server) -> Iterator[Page]:
    page = Page(browser, server.base_url)
    yield page
    page.close()
    assert not page.errors, page.errors


def nonce_system() -> str:
    # a unique first line: the prompt shares no cached prefix with earlier requests (a cold prefill)
    return f"[{uuid.uuid4().hex[:12]}] You are a helpful assistant."


def api_chat(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The page's request, sent again with httpx without streaming, prefilled cold."""
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    r = httpx.post(base_url + "/v1/chat/completions", json={**body, "cache_prompt": False}, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


# -- the page ---------------------------------------------------------------------------------------

def test_the_page_loads_without_console_errors_and_shows_the_server(web: Page, server: Server) -> None:
    resp = web.page.goto(server.base_url + "/")
    assert resp.status == 200 and "script-src 'self'" in resp.headers["content-security-policy"]
    page = web.open()
    models = httpx.get(server.base_url + "/v1/models").json()["data"]
    assert page.eval_on_selector_all("#model option", "os => os.map(o => o.value)") == [m["id"] for m in models]
    page.wait_for_function("() => document.querySelector('#srv-status').textContent === 'ready'")
    page.wait_for_function("() => /^\\d+ \\/ \\d+$/.test(document.querySelector('#srv-slots').textContent)")
    total = httpx.get(server.base_url + "/props").json()["total_slots"]
    assert page.text_content("#srv-slots").endswith(f"/ {total}")
    page.wait_for_function("() => /hits|no lookups/.test(document.querySelector('#srv-cache').textContent)")
    assert page.is_visible("#empty") and not page.is_visible("#hooks-box")  # this server has no hook policy


def test_conversations_are_kept_renamed_and_deleted(web: Page) -> None:
    page = web.open()
    convs = [{"id": f"c{i}", "title": f"chat {i}", "system": f"system {i}", "created": i,
              "messages": [{"role": "user", "content": f"question {i}"},
                           {"role": "assistant", "content": f"**answer** {i}", "finish": "stop"}]} for i in (1, 2)]
    page.evaluate("([k, v]) => localStorage.setItem(k, v)", [CONVERSATIONS, json.dumps(convs)])
    web.open()
    assert page.eval_on_selector_all(".conv-title", "ts => ts.map(t => t.textContent)") == ["chat 1", "chat 2"]
    assert page.text_content("article.msg.assistant .body strong") == "answer"  # markdown
    page.click('.conv[data-id="c2"] .conv-title')
    assert page.text_content("article.msg.user .bubble") == "question 2" and page.input_value("#system") == "system 2"
    page.hover('.conv[data-id="c2"]')
    page.click('.conv[data-id="c2"] button[title="Rename"]')
    page.fill(".conv-rename", "renamed")
    page.press(".conv-rename", "Enter")
    assert [c["title"] for c in web.stored()] == ["chat 1", "renamed"]
    page.hover('.conv[data-id="c1"]')
    page.click('.conv[data-id="c1"] button[title="Delete"]')  # asks first
    assert len(web.stored()) == 2
    page.click('.conv[data-id="c1"] button[title="Delete"]')
    assert [c["id"] for c in web.stored()] == ["c2"]
    page.click("#new-chat")
    assert [c["title"] for c in web.stored()] == ["New chat", "renamed"] and page.is_visible("#empty")
    page.reload()  # kept across reloads
    page.wait_for_function("() => document.querySelector('#model').value !== ''")
    assert page.eval_on_selector_all(".conv-title", "ts => ts.map(t => t.textContent)") == ["New chat", "renamed"]

def test_two_tabs_keep_each_others_conversations(web: Page) -> None:
    """Each tab wrote its own list over the other's: the other tab's conversations were lost."""
    a = web.open()
    b = web.context.new_page()  # a second tab of the same browser: the same local storage
    b.set_default_timeout(TIMEOUT_MS)
    b.on("pageerror", lambda e: web.errors.append(f"uncaught (tab b): {e}"))
    b.goto(web.base_url + "/")
    b.wait_for_function("() => document.querySelector('#model').value !== ''")
    for page, text in ((b, "Tab B says hello."), (a, "Tab A says hello.")):
        page.fill("#max_tokens", "4")
        page.dispatch_event("#max_tokens", "change")
        page.fill("#input", text)
        page.press("#input", "Enter")
        page.wait_for_selector("article.msg.assistant .finish")
    titles = "() => [...document.querySelectorAll('.conv-title')].map(t => t.textContent)"
    assert sorted(c["title"] for c in web.stored()) == ["Tab A says hello.", "Tab B says hello."]
    for page in (a, b):  # each tab lists the other's too, without a reload
        page.wait_for_function(f"() => ({titles})().length === 2")
    # a conversation deleted in one tab stays deleted when the other saves
    a.hover('.conv:has-text("Tab B") .conv-title')
    a.click('.conv:has-text("Tab B") button[title="Delete"]')
    a.click('.conv:has-text("Tab B") button[title="Delete"]')
    b.click("#new-chat")
    assert sorted(c["title"] for c in web.stored()) == ["New chat", "Tab A says hello."]
    b.wait_for_function(f"() => !({titles})().includes('Tab B says hello.')")
    b.close()


def test_a_message_streams_into_the_page(web: Page, server: Server) -> None:
    page = web.open()
    system = nonce_system()
    web.settings(system=system, max_tokens=60)
    # every text the reply's body showed while it streamed
    page.evaluate("""() => {
        window.__seen = [];
        new MutationObserver(() => {
            const bodies = document.querySelectorAll('article.msg.assistant .body');
            const live = document.querySelector('article.msg .live');
            if (bodies.length && live) window.__seen.push(bodies[bodies.length - 1].textContent);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    }""")
    web.send("Name three colours of the rainbow and say one thing about each.")
    web.wait_done()
    seen = [s for s in page.evaluate("window.__seen") if s]
    final = page.text_content("article.msg.assistant .body")
    assert len(set(seen)) >= 3 and len(seen[0]) < len(final) / 2, seen  # shown in several steps while live
    [conv] = web.stored()
    user, reply = conv["messages"]
    assert user == {"role": "user", "content": "Name three colours of the rainbow and say one thing about each."}
    body = web.chat_bodies[0]
    assert body["messages"][0] == {"role": "system", "content": system} and body["stream"] is True
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0, 60, 7)
    expected = api_chat(server.base_url, body)["choices"][0]
    assert reply["content"] == expected["message"]["content"] and reply["finish"] == expected["finish_reason"]
    assert conv["title"].startswith("Name three colours")


def test_right_to_left_text_takes_its_own_direction(web: Page) -> None:
    """A message in Arabic or Hebrew is laid out right to left (dir="auto"): its final '!' at the left end."""
    page = web.open()
    text = "مرحبا بالعالم!"
    conv = {"id": "rtl", "title": text, "system": "", "created": 0, "messages": [
        {"role": "user", "content": text}, {"role": "assistant", "content": text, "finish": "stop"},
        {"role": "user", "content": "hello!"}]}
    page.evaluate("([k, v]) => localStorage.setItem(k, v)", [CONVERSATIONS, json.dumps([conv])])
    web.open()
    direction = "(sel) => [...document.querySelectorAll(sel)].map(n => getComputedStyle(n).direction)"
    assert page.evaluate(direction, "article.msg.user .bubble") == ["rtl", "ltr"]
    assert page.evaluate(direction, "article.msg.assistant .body") == ["rtl"]
    assert page.evaluate(direction, ".conv-title") == ["rtl"]
    page.fill("#input", text)
    assert page.get_attribute("#input", "dir") == "auto" and page.evaluate(direction, "#input") == ["rtl"]
    # the '!' ends the sentence at the left, as in any right-to-left text
    assert page.evaluate("""() => {
        const t = document.querySelector('article.msg.user .bubble').firstChild, x = (i) => {
            const r = document.createRange();
            r.setStart(t, i);
            r.setEnd(t, i + 1);
            return r.getBoundingClientRect().left;
        };
        return x(t.length - 1) < x(0);
    }""")


def test_a_refused_message_leaves_the_conversation_and_goes_back_into_the_input(web: Page, tmp_path: Any) -> None:
    """A refused message stayed in the conversation and was sent, and refused, again with every later message."""
    from tests.images import png_bytes, solid

    page = web.open()
    system = nonce_system()
    web.settings(system=system, max_tokens=4)
    too_long = "word " * 3000  # more than the context
    page.fill("#input", too_long)
    page.press("#input", "Enter")
    page.wait_for_selector("#notice:not([hidden])")
    web.wait_done()
    assert page.is_visible("#notice") and "Not sent: 400" in page.text_content("#notice")
    assert page.input_value("#input") == too_long and page.locator("article.msg").count() == 0
    assert web.stored()[0]["messages"] == []
    # an image for this text-only server: the text comes back, the image does not stay in the conversation
    picture = tmp_path / "red.png"
    picture.write_bytes(png_bytes(8, 8, solid((255, 0, 0))))
    page.set_input_files("#attach-file", str(picture))
    page.wait_for_selector("#attachments img.thumb")
    page.click("#notice-close")
    page.fill("#input", "What is this?")
    page.press("#input", "Enter")
    page.wait_for_selector("#notice:not([hidden])")
    web.wait_done()
    assert "Not sent: 400" in page.text_content("#notice") and page.input_value("#input") == "What is this?"
    assert web.stored()[0]["messages"] == [] and page.locator("#attachments img").count() == 0
    # the next message goes out on its own and is answered
    web.send("Say hello.")
    web.wait_done()
    assert page.is_hidden("#notice")
    assert web.chat_bodies[-1]["messages"] == [{"role": "system", "content": system},
                                               {"role": "user", "content": "Say hello."}]
    user, reply = web.stored()[0]["messages"]
    assert user["content"] == "Say hello." and "error" not in reply and reply["content"]
    assert len([e for e in web.errors if "status of 400" in e]) == 2  # the browser logs the two refusals
    web.errors[:] = [e for e in web.errors if "status of 400" not in e]


def _metric(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_stop_ends_the_generation(web: Page, server: Server) -> None:
    page = web.open()
    web.settings(system=nonce_system(), temperature=0.8, seed=None, max_tokens=1500)
    disconnects = _metric(server.base_url, "skippy:http_client_disconnects_total")
    web.send("Write a very long story about a lighthouse keeper and a storm.")
    page.wait_for_function("() => (document.querySelector('article.msg.assistant .body')?.textContent || '')"
                           ".length > 40")
    assert page.is_visible("#stop") and not page.is_visible("#send")
    page.click("#stop")
    page.wait_for_selector("#send:not([hidden])")
    assert page.is_hidden("#stop")
    page.wait_for_selector("article.msg.assistant .badge.warn")
    assert page.text_content("article.msg.assistant .badge.warn") == "stopped"
    [conv] = web.stored()
    reply = conv["messages"][-1]
    assert reply["stopped"] and "finish" not in reply and "usage" not in reply and reply["content"]
    # the server saw the client go and freed the sequence (polled: the disconnect reaches it asynchronously)
    for _ in range(600):
        if (httpx.get(server.base_url + "/health").json()["slots_processing"] == 0
                and _metric(server.base_url, "skippy:http_client_disconnects_total") > disconnects):
            break
        page.wait_for_timeout(200)
    else:
        raise AssertionError("the stopped request still runs on the server")
    # a new message works after a stop
    web.set("max_tokens", 8)
    web.send("Say hello.")
    web.wait_done()
    assert web.stored()[0]["messages"][-1]["finish"] in ("stop", "length")


def test_stop_before_the_reply_puts_the_message_back_in_the_box(web: Page) -> None:
    """Stop before the first token left the user turn and an empty reply: the next message went out as a second
    user turn in a row. The request is held in the browser (never answered), so Stop comes before any reply."""
    page = web.open()
    web.settings(system=nonce_system(), max_tokens=8)
    held: list[Any] = []
    page.route("**/v1/chat/completions", lambda route: held.append(route))  # not continued: no reply starts
    page.fill("#input", "Tell me about lighthouses.")
    page.press("#input", "Enter")
    page.wait_for_function("() => !document.querySelector('#stop').hidden")
    page.click("#stop")
    page.wait_for_selector("#send:not([hidden])")
    assert "Stopped before the reply" in page.text_content("#notice")
    assert page.input_value("#input") == "Tell me about lighthouses." and page.locator("article.msg").count() == 0
    assert web.stored()[0]["messages"] == []
    page.unroute("**/v1/chat/completions")
    web.send("Say hello.")
    web.wait_done()
    [user] = [m for m in web.chat_bodies[-1]["messages"] if m["role"] == "user"]  # one user turn
    assert user["content"] == "Say hello."


def test_a_reload_while_a_reply_streams_keeps_the_reply_so_far_as_stopped(web: Page) -> None:
    """A reload mid-reply lost the reply, and the next message went out as a second user turn in a row."""
    page = web.open()
    web.settings(system=nonce_system(), temperature=0.8, seed=None, max_tokens=1500)
    web.send("Write a very long story about a lighthouse keeper and a storm.")
    # the page saves a streaming reply every 500 ms: reload once the saved copy holds more than 40 characters
    page.wait_for_function(f"() => {{ const m = JSON.parse(localStorage.getItem('{CONVERSATIONS}') || '[]')[0]"
                           "?.messages?.at(-1); return m?.role === 'assistant' && (m.content || '').length > 40; }")
    page.reload()
    page.wait_for_function("() => document.querySelector('#model').value !== ''")
    assert page.text_content("article.msg.assistant .badge.warn") == "stopped"
    assert len(page.text_content("article.msg.assistant .body")) > 40 and page.locator(".live").count() == 0
    reply = web.stored()[0]["messages"][-1]
    assert reply["role"] == "assistant" and reply["stopped"] and len(reply["content"]) > 40
    web.set("max_tokens", 4)
    web.send("Thanks.")
    web.wait_done()
    assert [m["role"] for m in web.chat_bodies[-1]["messages"]] == ["system", "user", "assistant", "user"]
    assert web.chat_bodies[-1]["messages"][2]["content"] == reply["content"]


def test_a_tool_call_is_a_card_that_can_be_answered_and_the_reply_continues(web: Page, server: Server) -> None:
    page = web.open()
    web.settings(system=nonce_system(), max_tokens=80)
    page.check("#tools-on")
    page.select_option("#tool_choice", "required")
    web.send("What is the weather in Paris?")
    web.wait_done()
    card = page.locator(".toolcard").first
    assert card.locator(".tc-name").text_content() == "get_weather"
    args = json.loads(card.locator(".tc-args").text_content())
    assert isinstance(args.get("city"), str) and args["city"]
    call_id = card.get_attribute("data-call-id")
    assert call_id and web.chat_bodies[0]["tool_choice"] == "required"
    assert web.chat_bodies[0]["tools"][0]["function"]["name"] == "get_weather"

    result = '{"temperature_c": 21, "sky": "sunny"}'
    card.locator(".tc-input").fill(result)
    card.locator(".tc-send").click()
    page.wait_for_function("() => document.querySelectorAll('article.msg.assistant').length === 2")
    web.wait_done()
    answered = page.locator(f'.toolcard.answered[data-call-id="{call_id}"]')
    assert answered.locator(".tc-result pre").text_content() == result
    assert page.locator(".tc-input").count() == 0 or page.locator("article.msg.assistant").nth(1).locator(
        ".tc-input").count() > 0  # only a new call waits for an answer
    # the continuation was asked with the tool result after the call, and answered
    body = web.chat_bodies[1]
    assert body["messages"][-2]["tool_calls"][0]["id"] == call_id
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": result}
    assert body["tool_choice"] == "auto"  # "required" forced the call on the user's message only
    reply = web.stored()[0]["messages"][-1]
    assert reply["role"] == "assistant" and "error" not in reply and reply.get("finish")
    assert reply["content"] or reply["tool_calls"]
    expected = api_chat(server.base_url, body)["choices"][0]["message"]
    assert reply["content"] == (expected["content"] or "")


def test_the_uncertainty_view_tints_every_token_and_its_tooltip_shows_the_api_numbers(web: Page,
                                                                                     server: Server) -> None:
    page = web.open()
    web.settings(system=nonce_system(), max_tokens=40)
    web.send("Explain in two sentences why the sky is blue.")
    web.wait_done()
    assert page.locator(".tok").count() == 0
    page.check("#uncertainty", force=True)  # the switch's input is visually hidden behind its track
    page.wait_for_selector(".unc svg.chart")

    expected = api_chat(server.base_url, web.chat_bodies[0])["choices"][0]["logprobs"]["content"]
    spans = page.locator("article.msg.assistant .tok")
    assert spans.count() == len(expected) > 5
    colours = page.eval_on_selector_all("article.msg.assistant .tok", "ts => ts.map(t => t.style.backgroundColor)")
    assert all(c.startswith("rgba(") for c in colours), colours  # one tinted span per generated token
    assert page.locator("svg.chart rect.bar").count() == len(expected)
    threshold = httpx.get(server.base_url + "/props").json()["signals"]["high_entropy_threshold"]
    assert page.locator("svg.chart line.thr").count() == 1
    assert f"threshold ({threshold:g} nats)" in page.text_content(".unc-stats")
    assert page.text_content(".legend-title") == "entropy (nats)"
    high = sum(1 for e in expected if e["entropy"] > threshold)
    assert page.locator(".tok.high").count() == high

    worst = max(range(len(expected)), key=lambda i: expected[i]["entropy"])
    for i in sorted({0, len(expected) // 2, worst, len(expected) - 1}):
        page.hover(f'.tok[data-i="{i}"]')
        page.wait_for_selector("#tooltip:not([hidden])")
        tip = page.locator("#tooltip")
        want = expected[i]
        for field in ("logprob", "entropy", "margin"):
            cell = tip.locator(f'[data-field="{field}"]')
            assert float(cell.get_attribute("data-value")) == want[field], (i, field)
            assert cell.text_content().startswith(f"{want[field]:.4f}")
        assert tip.locator('[data-field="token"]').text_content() == json.dumps(want["token"], ensure_ascii=False)
        alts = tip.locator('[data-field="alt-logprob"]')
        assert [float(alts.nth(j).get_attribute("data-value")) for j in range(alts.count())] == \
            [t["logprob"] for t in want["top_logprobs"]]
        assert alts.count() == 5
    page.hover(f'.tok[data-i="{worst}"]')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-uncertainty.png"))
    # hovering the chart's bar shows the same token
    page.hover(f'svg.chart rect.bar[data-i="{worst}"]')
    assert float(page.get_attribute('#tooltip [data-field="entropy"]', "data-value")) == expected[worst]["entropy"]
    page.uncheck("#uncertainty", force=True)
    assert page.locator(".tok").count() == 0 and page.locator("article.msg.assistant .body.md").count() == 1


PAYLOADS = [
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "[link](javascript:window.__pwned='md-link')",
    "<a href=\"javascript:window.__pwned='a'\">a</a>",
    "<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>",
    "<svg onload=\"window.__pwned='svg'\"></svg>",
    "<details open ontoggle=\"window.__pwned='toggle'\">x</details>",
    "<style>body { display: none }</style>",
    "```html\n<img src=x onerror=\"window.__pwned='code'\">\n```",
]
HOSTILE = "Here you go:\n\n" + "\n\n".join(PAYLOADS)
INERT_CHECK = """() => ({
    pwned: window.__pwned === undefined ? null : window.__pwned,
    dangerous: [...document.querySelectorAll(
        '#messages img, #messages script, #messages iframe, #messages style, #messages svg:not(.chart),' +
        '#conversations img, [onerror], [onload], [ontoggle], a[href^="javascript"]')].map(e => e.outerHTML),
    bodyShown: getComputedStyle(document.body).display !== 'none',
})"""


def test_model_output_with_html_is_rendered_inert(web: Page, server: Server) -> None:
    page = web.open()
    bad = "<img src=x onerror=\"window.__pwned='tok'\">"
    conversation = {"id": "x", "title": "<img src=x onerror=\"window.__pwned='title'\">", "system": "",
                    "created": 0, "messages": [
                        {"role": "user", "content": "<script>window.__pwned='user'</script> say it"},
                        {"role": "assistant", "content": HOSTILE, "reasoning": "thinking " + PAYLOADS[1],
                         "tool_calls": [{"id": "call_1", "type": "function",
                                         "function": {"name": bad, "arguments": json.dumps({"q": bad})}}],
                         "tokens": [{"text": bad, "token": bad, "logprob": -0.5, "entropy": 1.0, "margin": 0.5,
                                     "top": [{"token": bad, "logprob": -0.5}]}],
                         "hooks": [{"event": "mid_generation", "action": "inject", "position": 0, "text": bad}],
                         "finish": "stop"},
                        {"role": "tool", "tool_call_id": "call_1", "content": bad}]}
    page.evaluate("([k, v]) => localStorage.setItem(k, v)", [CONVERSATIONS, json.dumps([conversation])])
    web.open()
    page.wait_for_selector("article.msg.assistant .body.md")
    page.click("details.reasoning summary")
    for view in ("markdown", "tokens"):
        if view == "tokens":
            page.check("#uncertainty", force=True)
            page.wait_for_selector(".tok")
            page.hover(".tok")
            page.wait_for_selector("#tooltip:not([hidden])")
            assert page.text_content(".hook-inject .hook-text") == bad
        state = page.evaluate(INERT_CHECK)
        assert state == {"pwned": None, "dangerous": [], "bodyShown": True}, (view, state)
    # the payloads are shown as text where the page shows text
    assert page.text_content("article.msg.user .bubble").startswith("<script>")
    assert page.text_content(".conv-title") == conversation["title"]
    assert page.text_content(".tc-name") == bad and page.text_content(".tc-result pre") == bad
    page.uncheck("#uncertainty", force=True)
    assert "window.__pwned='code'" in page.text_content("article.msg.assistant pre code")  # a code block, as text

    # and from the live model: a reply asked to contain the markup streams through the same renderer
    web.settings(system=nonce_system(), max_tokens=60)
    web.send("Repeat exactly, with no code block: <img src=x onerror=\"window.__pwned='live'\"> "
             "<script>window.__pwned='live2'</script>")
    web.wait_done()
    state = page.evaluate(INERT_CHECK)
    assert state == {"pwned": None, "dangerous": [], "bodyShown": True}, state


# -- a server with a hook policy ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def hook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # threshold 0 nats: every token is high-entropy, so mid_generation fires at the 12th decoded token; the
    # policy runs on every request unless it says "mesh_hooks": false
    with Server(["--parallel", "2", "--n-ctx", "1024", "--hook-policy", "tests.integration.webui_policy:make",
                 "--high-entropy-threshold", "0", "--hooks-default-on"],
                tmp_path_factory.mktemp("webui-hooks") / "server.log",
                env={"PYTHONPATH": str(ROOT)}) as srv:
        yield srv


def test_hook_decisions_appear_in_the_timeline(browser: Any, hook_server: Server) -> None:
    web = Page(browser, hook_server.base_url)
    try:
        page = web.open()
        page.wait_for_selector("#hooks-box:not([hidden])")  # the server has a hook policy: its checkbox shows
        assert page.is_checked("#hooks-on")
        web.settings(system=nonce_system(), max_tokens=80)
        web.send("Write a short story about a lighthouse keeper.")
        web.wait_done()
        body = web.chat_bodies[0]
        assert body["mesh_hooks"] is True and body["return_hook_events"] is True
        reply = web.stored()[0]["messages"][-1]
        assert [(h["event"], h["action"]) for h in reply["hooks"]] == [
            ("before_chat", "none"), ("after_prefill", "none"), ("mid_generation", "inject"),
            ("mid_generation", "stop")]
        assert reply["finish"] == "policy_stop" and INJECTED.strip() not in reply["content"]
        assert "hook policy:" in page.text_content(".hook-summary")

        page.check("#uncertainty", force=True)
        page.wait_for_selector(".unc svg.chart")
        # the injection sits after the 11 tokens generated before the hook fired, marked as injected text
        inject = page.locator(".tokens .hook-inject")
        assert inject.locator(".hook-text").text_content() == INJECTED
        assert "injected by hook" in inject.locator(".hook-tag").text_content()
        assert page.evaluate("""() => {
            let n = 0, node = document.querySelector('.tokens .hook-inject');
            while ((node = node.previousElementSibling)) n += node.classList.contains('tok');
            return n;
        }""") == 11
        assert page.locator(".tokens .hook-none").count() == 2  # before_chat and after_prefill: no action
        stop = page.locator(".tokens .hook-stop")
        assert stop.count() == 1 and "policy_stop" in stop.get_attribute("title")
        assert stop.get_attribute("data-position") == str(len(reply["tokens"]))  # the stop ended it
        assert page.locator("svg.chart line.hookline").count() == 4
        assert page.locator("svg.chart line.hookline.hook-inject").count() == 1
        assert page.text_content(".unc-stats").count("4 hook decisions") == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "webui-hooks.png"))
    finally:
        web.close()
    assert not web.errors, web.errors


def test_unticking_the_hook_policy_keeps_the_message_out_of_it(browser: Any, hook_server: Server) -> None:
    """With --hooks-default-on the page must say "mesh_hooks": false, not only leave out true."""
    web = Page(browser, hook_server.base_url)
    try:
        page = web.open()
        page.wait_for_selector("#hooks-box:not([hidden])")
        web.settings(system=nonce_system(), max_tokens=40)
        page.uncheck("#hooks-on")
        web.send("Write a short story about a lighthouse keeper.")
        web.wait_done()
        assert web.chat_bodies[0]["mesh_hooks"] is False and "return_hook_events" not in web.chat_bodies[0]
        reply = web.stored()[0]["messages"][-1]
        assert reply["finish"] in ("stop", "length") and INJECTED.strip() not in reply["content"]
        assert not reply["hooks"] and page.locator(".hook-summary").count() == 0
        page.check("#hooks-on")
        web.send("And another one.")
        web.wait_done()
        assert web.chat_bodies[1]["mesh_hooks"] is True and web.stored()[0]["messages"][-1]["hooks"]  # ran again
    finally:
        web.close()
    assert not web.errors, web.errors


# -- a server that consults another model (--consult) --------------------------------------------------

@pytest.fixture(scope="module")
def consult_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # SmolLM2 consults Gemma on every start (entropy >= 0 nats: always unsure)
    with Server(["--model", "smollm2", "--model", GEMMA, "--consult", GEMMA,
                 "--consult-entropy", "0", "--consult-max-tokens", "32", "--parallel", "2", "--n-ctx", "1024"],
                tmp_path_factory.mktemp("webui-consult") / "server.log") as srv:
        yield srv


def test_a_consultation_shows_in_the_timeline_with_its_peer(browser: Any, consult_server: Server) -> None:
    web = Page(browser, consult_server.base_url)
    try:
        page = web.open()
        page.wait_for_selector("#hooks-box:not([hidden])")  # --consult is a hook policy: its checkbox shows
        web.settings(system=nonce_system(), max_tokens=24)
        web.send("What is the capital of France?")
        web.wait_done()
        reply = web.stored()[0]["messages"][-1]
        consulted = [h for h in reply["hooks"] if h.get("consult")]
        assert consulted and consulted[0]["event"] == "after_prefill"
        assert consulted[0]["consult"]["peer"] == GEMMA
        assert f"asked {GEMMA}" in page.text_content(".hook-summary")
        page.check("#uncertainty", force=True)
        page.wait_for_selector(".unc svg.chart")
        label = page.locator(".tokens .hook-consult").first.text_content()
        assert label.startswith(f"asked {GEMMA}") and " ms" in label
    finally:
        web.close()
    assert not web.errors, web.errors


# -- images (a --mmproj server) --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from tests.tiny_models import ensure_tiny_mmproj

    mmproj = ensure_tiny_mmproj(tmp_path_factory.mktemp("webui-mmproj"))
    with Server(["--mmproj", str(mmproj), "--parallel", "2", "--n-ctx", "1024"],
                tmp_path_factory.mktemp("webui-vision") / "server.log") as srv:
        yield srv


def send_picture(web: Any, picture: Any, *, max_tokens: int) -> Any:
    """Open the page, attach ``picture``, send "Describe the picture." and wait for the reply; the page."""
    page = web.open()
    web.settings(system=nonce_system(), max_tokens=max_tokens)
    page.set_input_files("#attach-file", str(picture))
    page.wait_for_selector("#attachments img.thumb")
    web.send("Describe the picture.")
    web.wait_done()
    return page


def test_an_attached_image_is_sent_as_an_image_url_part_and_shown(browser: Any, vision_server: Server,
                                                                  tmp_path: Any) -> None:
    from tests.images import png_bytes, solid

    picture = tmp_path / "red.png"
    picture.write_bytes(png_bytes(40, 30, solid((255, 0, 0))))
    web = Page(browser, vision_server.base_url)
    try:
        page = send_picture(web, picture, max_tokens=8)
        [body] = web.chat_bodies
        user = body["messages"][-1]
        assert user["content"][0]["type"] == "image_url"
        assert user["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
        assert user["content"][1] == {"type": "text", "text": "Describe the picture."}
        assert page.locator("article.msg.user img.thumb").count() == 1
        assert page.locator("#attachments img").count() == 0  # sent: the strip is empty again
        reply = web.stored()[0]["messages"][-1]
        expected = api_chat(vision_server.base_url, body)["choices"][0]
        assert reply["content"] == expected["message"]["content"]
    finally:
        web.close()
    assert not web.errors, web.errors


def test_an_image_too_large_to_store_is_left_out_of_storage_and_saving_goes_on(browser: Any, vision_server: Server,
                                                                                tmp_path: Any) -> None:
    """A photo of a few MB overflowed local storage and from then on nothing was saved, silently."""
    from tests.images import png_bytes

    picture = tmp_path / "noise.png"
    picture.write_bytes(png_bytes(600, 600, 7))  # random pixels: ~1 MB, a data URL of ~1.4 M characters
    web = Page(browser, vision_server.base_url)
    try:
        page = send_picture(web, picture, max_tokens=4)
        assert "could not be kept" in page.text_content("#notice")
        assert page.locator("article.msg.user img.thumb").count() == 1  # still shown in this page
        user, reply = web.stored()[0]["messages"]
        assert user == {"role": "user", "content": "Describe the picture.", "images": [], "imagesDropped": 1}
        assert reply["content"]
        web.send("Say hello.")  # saving goes on
        web.wait_done()
        assert [m["content"] for m in web.stored()[0]["messages"] if m["role"] == "user"] == [
            "Describe the picture.", "Say hello."]
        page.reload()
        page.wait_for_function("() => document.querySelector('#model').value !== ''")
        assert page.text_content("article.msg.user .thumb.dropped") == "image not kept (too large to store)"
        # storage full: the page says the conversations could not be saved
        page.evaluate("""() => {
            let n = 0;  // the longest junk that fits: nothing is left
            for (let step = 1 << 23; step >= 1; step >>= 1) {
                try { localStorage.setItem('junk', 'x'.repeat(n + step)); n += step; } catch { /* too long */ }
            }
            localStorage.setItem('junk', 'x'.repeat(n));
        }""")
        page.click("#new-chat")
        assert "Could not save the conversations" in page.text_content("#notice")
        page.evaluate("localStorage.removeItem('junk')")
    finally:
        web.close()
    assert all("local storage" not in e for e in web.errors), web.errors


# -- a server with an API key --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def key_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(["--parallel", "2", "--n-ctx", "512", "--api-key", "sk-webui"],
                tmp_path_factory.mktemp("webui-key") / "server.log") as srv:
        yield srv


def test_the_api_key_is_asked_once_and_kept_for_the_tab(browser: Any, key_server: Server) -> None:
    web = Page(browser, key_server.base_url)
    try:
        page = web.page
        page.goto(key_server.base_url + "/")
        page.wait_for_selector("#key-dialog[open]")
        assert page.is_hidden("#key-error")
        page.fill("#key-input", "sk-wrong")
        page.press("#key-input", "Enter")
        page.wait_for_selector("#key-dialog[open] #key-error:not([hidden])")  # refused: asked again, saying so
        page.fill("#key-input", "sk-webui")
        page.press("#key-input", "Enter")
        page.wait_for_function("() => document.querySelector('#model').value !== ''")
        assert page.evaluate("sessionStorage.getItem('skippy.apiKey')") == "sk-webui"
        assert page.evaluate("localStorage.getItem('skippy.apiKey')") is None
        page.reload()  # the same tab: not asked again
        page.wait_for_function("() => document.querySelector('#model').value !== ''")
        assert not page.is_visible("#key-dialog")
        web.settings(system=nonce_system(), max_tokens=4)
        web.send("Hi")
        web.wait_done()
        assert "error" not in web.stored()[0]["messages"][-1]
    finally:
        web.close()
    # the only errors are the 401s before the key was given
    assert web.errors and all("401" in e for e in web.errors), web.errors


def test_closing_the_key_dialog_fails_the_waiting_requests_and_the_next_one_asks_again(browser: Any,
                                                                                       key_server: Server) -> None:
    """Escape closed the dialog and left its requests waiting for good: no models, "generating…" forever."""
    web = Page(browser, key_server.base_url)
    try:
        page = web.page
        page.goto(key_server.base_url + "/")
        page.wait_for_selector("#key-dialog[open]")
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.querySelector('#key-dialog').open")
        page.wait_for_function("() => document.querySelector('#model option')?.textContent === '(models unavailable)'")
        page.wait_for_function("() => document.querySelector('#srv-cache').textContent === 'needs the API key'")
        assert not page.is_visible("#key-dialog")  # the side panel's polling does not ask
        # a message asks again; closing the dialog again ends the request with a message, not a spinner
        page.fill("#input", "Hi")
        page.press("#input", "Enter")
        page.wait_for_selector("#key-dialog[open]")
        page.keyboard.press("Escape")
        page.wait_for_selector("#send:not([hidden])")
        assert page.locator(".live").count() == 0 and page.is_hidden("#stop")
        assert "needs an API key" in " ".join(page.locator(".msg-error, #notice").all_text_contents())
        # and the next one asks again: with the key given, the message goes out and the models load
        web.settings(system=nonce_system(), max_tokens=4)
        page.fill("#input", "Hello")
        page.press("#input", "Enter")
        page.wait_for_selector("#key-dialog[open]")
        page.fill("#key-input", "sk-webui")
        page.press("#key-input", "Enter")
        web.wait_done()
        assert "error" not in web.stored()[0]["messages"][-1] and web.stored()[0]["messages"][-1]["content"]
        page.wait_for_function("() => document.querySelector('#model').value !== ''")
        page.wait_for_function("() => document.querySelector('#srv-cache').textContent !== 'needs the API key'")
    finally:
        web.close()
    assert all("401" in e for e in web.errors), web.errors


def _covers(page: Any, selector: str) -> bool:
    """True if the element at the centre of ``selector`` is it (or inside it): nothing lies over it."""
    return page.evaluate("""(sel) => {
        const el = document.querySelector(sel);
        const r = el.getBoundingClientRect();
        const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        return r.width > 0 && r.right <= window.innerWidth + 1 && (top === el || el.contains(top));
    }""", selector)


def phone_page(browser: Any, server: Server) -> Page:
    """A :class:`Page` on a 390 x 844 touch screen (a phone), its requests recorded."""
    web = Page(browser, server.base_url)
    web.context.close()
    web.context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    web.page = web.context.new_page()
    web.page.set_default_timeout(TIMEOUT_MS)
    web.page.on("pageerror", lambda e: web.errors.append(f"uncaught: {e}"))
    web.page.on("request", web._request)
    return web


def test_on_a_phone_width_screen_the_chat_stays_usable_and_settings_are_a_drawer(browser: Any,
                                                                                  server: Server) -> None:
    """Issue 35.9: at 390 px the settings panel covered the conversation and the message box."""
    web = phone_page(browser, server)
    try:
        page = web.open()
        # the drawer starts closed, whatever a wide screen left in the settings: input and send are free
        assert not page.is_visible("#settings")
        assert _covers(page, "#input") and _covers(page, "#send") and _covers(page, "#toggle-settings")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scrolling
        page.screenshot(path=str(ARTIFACTS / "phone-chat.png"))
        # open it, change a setting, close it with its button; again, closed by the backdrop and by Escape
        page.click("#toggle-settings")
        assert page.is_visible("#settings") and page.get_attribute("#toggle-settings", "aria-expanded") == "true"
        page.screenshot(path=str(ARTIFACTS / "phone-settings.png"))
        web.settings(system=nonce_system(), max_tokens=12)
        page.click("#close-settings")
        assert not page.is_visible("#settings") and _covers(page, "#input")
        page.click("#toggle-settings")
        page.mouse.click(20, 400)  # the backdrop, left of the drawer
        assert not page.is_visible("#settings")
        page.click("#toggle-settings")
        page.keyboard.press("Escape")
        assert not page.is_visible("#settings")
        # a message goes out and its reply comes back on this screen, the settings taken
        web.send("Say hello.")
        web.wait_done()
        assert page.text_content("article.msg.assistant .body")
        assert web.chat_bodies[-1]["max_tokens"] == 12
        assert _covers(page, "#input")
        # a reload keeps the drawer closed; the wide layout's panel state is the desktop's own
        page.reload()
        page.wait_for_function("() => document.querySelector('#model').value !== ''")
        assert not page.is_visible("#settings")
    finally:
        web.close()
    assert not web.errors, web.errors


def test_on_a_phone_width_screen_the_conversations_open_from_the_chats_button(browser: Any, server: Server) -> None:
    """At 900 px and less the sidebar (+ New chat, the conversations, the server panel) was hidden for good."""
    web = phone_page(browser, server)
    try:
        page = web.open()
        convs = [{"id": f"c{i}", "title": f"chat {i}", "system": "", "created": i, "messages": [
            {"role": "user", "content": f"question {i}"}]} for i in (1, 2)]
        page.evaluate("([k, v]) => localStorage.setItem(k, v)", [CONVERSATIONS, json.dumps(convs)])
        web.open()
        assert not page.is_visible("#sidebar") and _covers(page, "#toggle-sidebar")
        page.click("#toggle-sidebar")
        assert page.get_attribute("#toggle-sidebar", "aria-expanded") == "true"
        assert _covers(page, "#new-chat") and _covers(page, '.conv[data-id="c2"] .conv-title')
        assert page.is_visible("#srv-status") and not page.is_visible("#settings")
        page.screenshot(path=str(ARTIFACTS / "phone-chats.png"))
        page.click('.conv[data-id="c2"] .conv-title')  # a conversation chosen: back to the chat, showing it
        assert not page.is_visible("#sidebar") and page.text_content("article.msg.user .bubble") == "question 2"
        page.click("#toggle-sidebar")
        page.click("#new-chat")
        assert not page.is_visible("#sidebar") and page.is_visible("#empty") and len(web.stored()) == 3
        page.click("#toggle-sidebar")  # closed by the backdrop and by Escape, as the settings are
        page.mouse.click(370, 400)
        assert not page.is_visible("#sidebar")
        page.click("#toggle-sidebar")
        page.keyboard.press("Escape")
        assert not page.is_visible("#sidebar") and _covers(page, "#input")
        page.set_viewport_size({"width": 1280, "height": 860})  # a wide screen: the sidebar is there, no button
        assert page.is_visible("#new-chat") and not page.is_visible("#toggle-sidebar")
    finally:
        web.close()
    assert not web.errors, web.errors
