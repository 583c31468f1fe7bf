"""Inline stylesheet and script of the HTML trace report (:mod:`aegis_probe.report.html`).

The script only reads the page's own DOM: it filters steps (agent, text, flagged only; also from
``?agent=NAME&q=TEXT&flagged=1`` in the URL), opens the step a timeline link points to, and
shows how many steps are visible.
"""

CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:18px}
header .sub{opacity:.75;font-size:13px}
section{padding:8px 24px}
h2{font-size:16px;margin:16px 0 8px}
h3{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:#5a6270;margin:4px 0 6px}
h4{font-size:13px;margin:12px 0 4px}
pre{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #e1e4ea;border-radius:4px;padding:6px 8px;margin:2px 0;max-height:24em;overflow:auto;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border:1px solid #e1e4ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4}
.grid{display:grid;grid-template-columns:2fr 1fr 1fr;gap:12px}
.card{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:10px 12px;min-width:0}
.facts{width:100%;table-layout:fixed}.facts th{width:6.5em}.facts code{word-break:break-all}
.verdict{display:inline-block;font-weight:700;padding:2px 10px;border-radius:12px;margin-bottom:6px}
.verdict.ok{background:#d9f5e1;color:#11652f}.verdict.bad{background:#fde0df;color:#9b1c1c}.verdict.na{background:#eceef2;color:#5a6270}
.kv{font-size:12px;color:#5a6270;margin-top:4px}
.err{color:#9b1c1c}
a.ext{display:inline-block;margin:8px 8px 0 0;padding:3px 10px;border-radius:4px;background:#2d5bd7;color:#fff;text-decoration:none}
.chip{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;white-space:nowrap;max-width:14em;overflow:hidden;text-overflow:ellipsis;vertical-align:middle}
.a0{background:#3b6fd8}.a1{background:#2f9e6e}.a2{background:#8a56c9}.a3{background:#c47a12}.a4{background:#1f93a8}
.a5{background:#b3437f}.a6{background:#5d7a1f}.a7{background:#6b6f80}.a8{background:#a4512c}.a9{background:#3d4fa0}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font-size:11px;font-weight:700;text-transform:uppercase;margin-left:6px}
.badge.blamed{background:#d42a2a;color:#fff}.badge.injected{background:#f08c00;color:#fff}.badge.error{background:#5b0f0f;color:#fff}
ul.flagged{margin:4px 0;padding-left:18px}
.hint{font-size:12px;color:#5a6270;margin:0 0 6px}
.tl-wrap{overflow-x:auto;background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:8px}
.tl{display:grid;gap:2px 1px;align-items:center}
.tl-label{position:sticky;left:0;background:#fff;padding-right:8px;grid-column:1;z-index:1}
.tl-tok{font-size:11px;color:#5a6270}
.tl-cell{display:block;height:20px;border-radius:2px;color:#fff;font-size:10px;text-align:center;line-height:20px;text-decoration:none;position:relative}
.tl-cell.tooled::after{content:"";position:absolute;left:50%;bottom:1px;width:4px;height:4px;margin-left:-2px;border-radius:50%;background:#fff}
.tl-cell.blamed{outline:3px solid #d42a2a;outline-offset:1px;z-index:2}
.tl-cell.injected{box-shadow:0 0 0 3px #f08c00;z-index:2}
.tl-cell.errored{background-image:repeating-linear-gradient(45deg,transparent 0 3px,rgba(0,0,0,.35) 3px 5px)}
.tl-cell.dim{opacity:.15}
.tl-bar{height:22px;display:flex;align-items:flex-end}.tl-bar i{display:block;width:100%;background:#9aa3b5;min-height:1px}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin-bottom:8px;position:sticky;top:0;background:#f5f6f8;padding:6px 0;z-index:3}
.filters input[type=search]{width:16em;padding:3px 6px}
#f-count{color:#5a6270;font-size:13px}
details.step{background:#fff;border:1px solid #e1e4ea;border-left:4px solid #e1e4ea;border-radius:4px;margin:3px 0}
details.step.injected{border-left-color:#f08c00;background:#fff8ec}
details.step.blamed{border-left-color:#d42a2a;background:#fff3f3}
details.step.errored{border-left-color:#5b0f0f}
details.step>summary{cursor:pointer;padding:4px 8px;display:flex;gap:8px;align-items:center;white-space:nowrap;overflow:hidden}
details.step>summary .idx{font:12px ui-monospace,monospace;color:#5a6270;min-width:3.5em}
details.step>summary .tools{font-size:12px;color:#2d5bd7}
details.step>summary .tok,details.step>summary .dur{font-size:12px;color:#5a6270}
details.step>summary .pv{color:#3c4250;overflow:hidden;text-overflow:ellipsis;flex:1}
details.step .body{padding:4px 12px 10px;border-top:1px solid #eef0f4}
.msg .role{font-size:12px;font-weight:600;color:#5a6270}
.mark{border-radius:4px;padding:6px 10px;margin:8px 0 4px}
.mark.blamed{background:#fde0df;border:1px solid #d42a2a}.mark.injected{background:#ffe8c7;border:1px solid #f08c00}
.mark .mode{font-weight:700}.mark .src{font-size:12px;color:#5a6270}
.mark dl{margin:4px 0 0;display:grid;grid-template-columns:max-content 1fr;gap:2px 10px}.mark dt{font-size:12px;font-weight:600}.mark dd{margin:0}
.meta{font-size:11px;color:#8a91a0;margin-top:8px}
.clip{font-size:11px;color:#8a91a0}
footer{padding:16px 24px;color:#8a91a0;font-size:12px}
@media (max-width:900px){.grid{grid-template-columns:1fr}}
"""

JS = """
(function () {
  var steps = Array.prototype.slice.call(document.querySelectorAll('details.step'));
  var cells = document.querySelectorAll('.tl-cell');
  var agent = document.getElementById('f-agent'), text = document.getElementById('f-text');
  var flagged = document.getElementById('f-flagged'), count = document.getElementById('f-count');
  var lower = new Map();
  function textOf(el) {
    if (!lower.has(el)) lower.set(el, el.textContent.toLowerCase());
    return lower.get(el);
  }
  function apply() {
    var a = agent.value, q = text.value.trim().toLowerCase(), f = flagged.checked, shown = 0;
    steps.forEach(function (el) {
      var ok = (!a || el.dataset.agent === a) && (!f || el.dataset.flagged === '1') && (!q || textOf(el).indexOf(q) >= 0);
      el.hidden = !ok;
      if (ok) shown++;
    });
    Array.prototype.forEach.call(cells, function (c) {
      c.classList.toggle('dim', !!a && c.dataset.agent !== a);
    });
    count.textContent = shown + ' of ' + steps.length + ' steps shown';
    document.body.setAttribute('data-shown', String(shown));
  }
  function openHash() {
    var el = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (el && el.classList.contains('step')) { el.hidden = false; el.open = true; el.scrollIntoView({block: 'start'}); }
  }
  var params = new URLSearchParams(location.search);
  if (params.has('agent')) agent.value = params.get('agent');
  if (params.has('q')) text.value = params.get('q');
  if (params.get('flagged') === '1') flagged.checked = true;
  agent.addEventListener('change', apply);
  text.addEventListener('input', apply);
  flagged.addEventListener('change', apply);
  document.getElementById('f-open').addEventListener('click', function () {
    steps.forEach(function (el) { if (!el.hidden) el.open = true; });
  });
  document.getElementById('f-close').addEventListener('click', function () {
    steps.forEach(function (el) { el.open = false; });
  });
  window.addEventListener('hashchange', openHash);
  apply();
  openHash();
})();
"""
