"""The reviewer's page as HTML, and the verdict form read back into a ``Verdict``.

Everything that came from production (query, answer, context text, doc and chunk ids,
trace ids, notes) goes through ``html.escape`` here and nowhere else builds markup. The
page is blind: it never shows an item's strata, HHEM score or feedback. Nothing is
fetched from outside the sidecar: the style and the keyboard script are inline, allowed
by a per-response nonce in the Content-Security-Policy.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from html import escape

from detectors.review.model import (
    REASONS,
    STRATA,
    SUPPORTED,
    Progress,
    Reason,
    ReviewContext,
    ReviewItem,
    Supported,
    Verdict,
)
from monitor.contract.rulekit.prediction_powered import RANDOM_STRATUM
from monitor.contract.trace import Spans

MAX_MISSING_IDS = 20
MAX_DOC_ID_CHARS = 200
MAX_NOTE_CHARS = 2000
MAX_SKIPPED = 50
MAX_TRACE_ID_CHARS = 128
MAX_FORM_FIELDS = 200

SUPPORTED_LABELS: dict[Supported, tuple[str, str]] = {  # value -> (label, key)
    "yes": ("yes", "y"),
    "partly": ("partly", "p"),
    "no": ("no", "n"),
    "no_claim": ("no claim", "c"),
}
REASON_LABELS: dict[Reason, tuple[str, str]] = {
    "wrong": ("wrong", "w"),
    "incomplete": ("incomplete", "i"),
    "off_topic": ("off-topic", "o"),
    "harmful": ("harmful", "h"),
    "slow": ("slow", "l"),
}
_ID_SPLIT = re.compile(r"[\s,]+")

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem}
h1{font-size:1.2rem}h2{font-size:1rem;margin:1rem 0 .3rem}
.text{white-space:pre-wrap;border:1px solid #ccc;padding:.5rem;background:#fafafa}
.ctx{margin:.4rem 0}.ctx label{font-weight:600}
.progress{color:#333;border-top:1px solid #ddd;margin-top:1rem;padding-top:.4rem}
.keys{color:#666;font-size:.85rem}.errors{color:#a00}
kbd{border:1px solid #aaa;border-radius:3px;padding:0 .25rem;font-size:.8rem}
fieldset{border:1px solid #ddd;margin:.6rem 0}
mark.unsupported{background:#fde2b8;text-decoration:underline wavy #b45309}
"""

# Single keys: y/p/n/c supported, 1-9 toggle a context, w/i/o/h/l reason, 0 clears it,
# m and e focus the missing-ids and note fields, s skips, Enter submits. In a text field
# only Escape (leave the field) is taken; Enter there submits as forms do.
_SCRIPT = """
(function(){
var form=document.getElementById('verdict');if(!form)return;
var sup={y:'yes',p:'partly',n:'no',c:'no_claim'};
var rea={w:'wrong',i:'incomplete',o:'off_topic',h:'harmful',l:'slow'};
function pick(name,value){var el=form.querySelector('input[name="'+name+'"][value="'+value+'"]');
if(el){el.checked=true;}}
document.addEventListener('keydown',function(ev){
var t=ev.target,typing=t&&(t.tagName==='TEXTAREA'||(t.tagName==='INPUT'&&t.type==='text'));
if(typing){if(ev.key==='Escape'){t.blur();ev.preventDefault();}return;}
if(ev.ctrlKey||ev.metaKey||ev.altKey)return;
var k=ev.key;
if(sup[k]){pick('supported',sup[k]);}
else if(rea[k]){pick('reason',rea[k]);}
else if(k==='0'){pick('reason','');}
else if(k>='1'&&k<='9'){var box=document.getElementById('ctx'+k);if(box){box.checked=!box.checked;}}
else if(k==='m'){document.getElementById('missing').focus();}
else if(k==='e'){document.getElementById('note').focus();}
else if(k==='s'){window.location.href=document.getElementById('skip').getAttribute('href');}
else if(k==='Enter'){form.requestSubmit();}
else{return;}
ev.preventDefault();});
})();
"""


class FormError(ValueError):
    """The verdict form is invalid; the message says which field and why (no item text)."""


@dataclass(frozen=True, slots=True)
class VerdictForm:
    """A submitted form: the verdict and the CSRF field it carried."""

    verdict: Verdict
    csrf: str
    skip: tuple[str, ...]


def parse_skip(raw: str) -> tuple[str, ...]:
    """Trace ids to pass over, from the ``skip`` parameter; bounded, malformed ids dropped."""
    ids = [i for i in raw.split(",") if 0 < len(i) <= MAX_TRACE_ID_CHARS and i.isprintable()]
    return tuple(dict.fromkeys(ids))[-MAX_SKIPPED:]


def review_url(skip: tuple[str, ...]) -> str:
    """``/review``, carrying the skip list when there is one."""
    if not skip:
        return "/review"
    return "/review?" + urllib.parse.urlencode({"skip": ",".join(skip)})


def parse_verdict_form(body: bytes, item: ReviewItem, reviewed_at: float) -> VerdictForm:
    """The verdict in an ``application/x-www-form-urlencoded`` body, validated against the
    item (relevant contexts must be the item's own doc ids)."""
    try:
        fields = urllib.parse.parse_qs(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=bool(body),
            max_num_fields=MAX_FORM_FIELDS,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormError("the form is not valid url-encoded UTF-8") from exc
    supported = _one(fields, "supported")
    if supported not in SUPPORTED:
        raise FormError("choose whether the answer is supported (yes, partly, no, no claim)")
    reason = _one(fields, "reason")
    if reason and reason not in REASONS:
        raise FormError("unknown reason category")
    known = {context.doc_id for context in item.contexts}
    relevant = tuple(dict.fromkeys(fields.get("relevant", [])))
    if not set(relevant) <= known:
        raise FormError("a relevant context is not one of this item's contexts")
    note = _one(fields, "note").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise FormError(f"the note is longer than {MAX_NOTE_CHARS} characters")
    verdict = Verdict(
        trace_id=item.trace_id,
        supported=supported,
        relevant_doc_ids=relevant,
        missing_doc_ids=parse_missing_ids(_one(fields, "missing")),
        reason=reason if reason else None,
        note=note,
        reviewed_at=reviewed_at,
    )
    return VerdictForm(verdict, _one(fields, "csrf"), parse_skip(_one(fields, "skip")))


def parse_missing_ids(raw: str) -> tuple[str, ...]:
    """Document ids separated by commas or white space; bounded in count and length."""
    ids = tuple(dict.fromkeys(i for i in _ID_SPLIT.split(raw.strip()) if i))
    if len(ids) > MAX_MISSING_IDS:
        raise FormError(f"at most {MAX_MISSING_IDS} missing document ids")
    for doc_id in ids:
        if len(doc_id) > MAX_DOC_ID_CHARS or not doc_id.isprintable():
            raise FormError(
                f"a missing document id is longer than {MAX_DOC_ID_CHARS} characters "
                "or holds control characters"
            )
    return ids


def _one(fields: dict[str, list[str]], name: str) -> str:
    values = fields.get(name, [""])
    if len(values) != 1:
        raise FormError(f"the field {name!r} appears more than once")
    return values[0]


def item_page(
    item: ReviewItem,
    progress: Progress,
    *,
    csrf: str,
    skip: tuple[str, ...],
    nonce: str,
    error: str | None = None,
    marks: bool = False,
) -> str:
    """The review form for one item (blind: no strata, score or feedback); with ``marks``
    the parts of the answer the judge found unsupported are marked."""
    action = "/review/" + urllib.parse.quote(item.trace_id, safe="")
    next_skip = review_url((*skip, item.trace_id)[-MAX_SKIPPED:])
    contexts = "".join(_context(i, context) for i, context in enumerate(item.contexts, 1))
    supported = "".join(
        _radio("supported", value, label, key) for value, (label, key) in SUPPORTED_LABELS.items()
    )
    reasons = _radio("reason", "", "none", "0") + "".join(
        _radio("reason", value, label, key) for value, (label, key) in REASON_LABELS.items()
    )
    errors = f'<p class="errors" role="alert">{escape(error)}</p>' if error else ""
    body = f"""<h1>Review</h1>{errors}
<h2>Query</h2><div class="text" id="query">{escape(item.query)}</div>
<h2>Answer</h2>{_answer(item, marks)}
<form id="verdict" method="post" action="{escape(action)}">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<input type="hidden" name="skip" value="{escape(",".join(skip))}">
<h2>Contexts <span class="keys">(<kbd>1</kbd>-<kbd>9</kbd> mark relevant)</span></h2>
{contexts or "<p>No contexts.</p>"}
<fieldset><legend>Is the answer supported by the contexts?</legend>{supported}</fieldset>
<fieldset><legend>Reason (optional)</legend>{reasons}</fieldset>
<p><label for="missing">Missing document ids (<kbd>m</kbd>; commas or spaces)</label><br>
<input type="text" id="missing" name="missing" size="60" maxlength="4000"></p>
<p><label for="note">Note (<kbd>e</kbd>)</label><br>
<textarea id="note" name="note" rows="3" cols="60" maxlength="{MAX_NOTE_CHARS}"></textarea></p>
<p><button type="submit" accesskey="r">Record (<kbd>Enter</kbd>)</button>
<a id="skip" href="{escape(next_skip)}" accesskey="s">Skip (<kbd>s</kbd>)</a></p>
</form>
<p class="keys">Keys: <kbd>y</kbd> yes, <kbd>p</kbd> partly, <kbd>n</kbd> no, <kbd>c</kbd> no claim;
<kbd>w</kbd> <kbd>i</kbd> <kbd>o</kbd> <kbd>h</kbd> <kbd>l</kbd> reason, <kbd>0</kbd> none;
<kbd>Esc</kbd> leaves a text field.</p>
{progress_html(progress)}"""
    return _document("Review", body, nonce, script=True)


def empty_page(progress: Progress, *, skip: tuple[str, ...], nonce: str) -> str:
    """Nothing left to review (apart from the skipped items)."""
    again = '<p><a id="again" href="/review">Show the skipped items again</a></p>' if skip else ""
    body = f'<h1>Review</h1><p id="done">Nothing left to review.</p>{again}'
    return _document("Review", body + progress_html(progress), nonce, script=False)


def error_page(message: str, nonce: str) -> str:
    """A refusal the reviewer reads (a bad form, an unknown item)."""
    body = (
        f'<h1>Review</h1><p class="errors">{escape(message)}</p><p><a href="/review">Back</a></p>'
    )
    return _document("Review", body, nonce, script=False)


def progress_html(progress: Progress) -> str:
    """Reviewed and queued counts, in total and per stratum (aggregate: not about any item;
    an item in several strata counts in each)."""
    cells = "".join(
        f"<li>{escape(stratum)}: {progress.reviewed.get(stratum, 0)} / "
        f"{progress.queued.get(stratum, 0)}</li>"
        for stratum in STRATA
    )
    return (
        '<div class="progress" id="progress"><strong>Progress</strong> '
        "(reviewed / queued, per stratum)<ul>" + cells + "</ul></div>"
    )


def shows_spans(item: ReviewItem, judge_spans: str) -> bool:
    """Whether the page marks ``item``'s spans (``http.judge_spans``). Random-stratum
    verdicts estimate the judge's bias: a reviewer who saw the judge's view would lean
    toward it and hide the bias, so by default they stay blind."""
    if judge_spans == "never" or not item.spans:
        return False
    return judge_spans == "always" or RANDOM_STRATUM not in item.strata


def _answer(item: ReviewItem, marks: bool) -> str:
    if not marks:
        return f'<div class="text" id="answer">{escape(item.answer)}</div>'
    note = (
        '<p class="keys" id="marks-note">Marked: what the judge found unsupported by the '
        "contexts. Judge for yourself; the marks may be wrong either way.</p>"
    )
    return f'<div class="text" id="answer">{marked(item.answer, item.spans)}</div>{note}'


def marked(answer: str, spans: Spans) -> str:
    """``answer`` escaped, with each span in ``<mark>``: the marks are the only markup, the
    text inside them escaped like the rest. Spans count in the answer as the judge read
    it, stripped of surrounding whitespace; out-of-range or overlapping parts are
    clipped (a span is a hint, never a reason to fail the page)."""
    lead = len(answer) - len(answer.lstrip())
    judged_end = lead + len(answer.strip())
    parts, at = [], 0
    for span_start, span_end in sorted(spans):
        start, end = max(lead + span_start, at), min(lead + span_end, judged_end)
        if start >= end:
            continue
        parts.append(escape(answer[at:start]))
        parts.append(f'<mark class="unsupported">{escape(answer[start:end])}</mark>')
        at = end
    parts.append(escape(answer[at:]))
    return "".join(parts)


def _context(index: int, context: ReviewContext) -> str:
    key = f"<kbd>{index}</kbd> " if index <= 9 else ""
    chunk = f" / chunk {escape(context.chunk_id)}" if context.chunk_id else ""
    text = escape(context.text) if context.text else "<em>(no text)</em>"
    return (
        f'<div class="ctx"><input type="checkbox" id="ctx{index}" name="relevant" '
        f'value="{escape(context.doc_id)}"> <label for="ctx{index}">{key}'
        f"{escape(context.doc_id)}{chunk}</label>"
        f'<div class="text">{text}</div></div>'
    )


def _radio(name: str, value: str, label: str, key: str) -> str:
    ident = f"{name}-{value or 'none'}"
    return (
        f'<label for="{ident}"><input type="radio" id="{ident}" name="{name}" '
        f'value="{value}"> {escape(label)} (<kbd>{key}</kbd>)</label> '
    )


def _document(title: str, body: str, nonce: str, *, script: bool) -> str:
    tag = f'<script nonce="{nonce}">{_SCRIPT}</script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>"
        f'<style nonce="{nonce}">{_STYLE}</style></head>'
        f"<body>{body}{tag}</body></html>"
    )
