"""The bench's app that is not hello world (the peers part): a small Flask app with a template
render, a JSON endpoint and a form POST, so a gateway's share is seen at a realistic cost per
request. Served as ``bench.flask_app:app`` by every server, like ``bench.apps:app``.

  /         an HTML page rendered from a Jinja template (a loop over 20 items; templates are
            compiled once, as Flask caches templates loaded from files)
  /api      JSON: a small dict of lists, through Flask's jsonify
  /form     POST application/x-www-form-urlencoded: the fields parsed by Flask, a rendered
            confirmation; GET: the form itself
"""
from flask import Flask, jsonify, render_template, request
from jinja2 import DictLoader

app = Flask(__name__)

ITEMS = [{"id": i, "name": "item %d" % i, "price": round(1.5 * i, 2)} for i in range(20)]

PAGE = """<!doctype html>
<html><head><title>{{ title }}</title></head>
<body><h1>{{ title }}</h1>
<table>{% for item in items %}
<tr class="{{ loop.cycle('odd', 'even') }}"><td>{{ item.id }}</td><td>{{ item.name|e }}</td>
<td>{{ '%.2f'|format(item.price) }}</td></tr>{% endfor %}
</table></body></html>
"""

FORM = """<!doctype html>
<html><body>{% if fields %}<p>Thank you, {{ fields.name|e }}.</p><ul>
{% for key, value in fields.items() %}<li>{{ key|e }}: {{ value|e }}</li>{% endfor %}</ul>
{% else %}<form method="post"><input name="name"><input name="email">
<textarea name="message"></textarea><button>Send</button></form>{% endif %}
</body></html>
"""

# compiled once and cached, as templates from files are
app.jinja_loader = DictLoader({"page.html": PAGE, "form.html": FORM})

# the body the bench POSTs to /form (drivers/wrk.py's script): three urlencoded fields
FORM_BODY = b"name=Ada+Lovelace&email=ada%40example.org&message=" + b"x" * 200


@app.route("/")
def page():
    return render_template("page.html", title="Catalogue", items=ITEMS)


@app.route("/api")
def api():
    return jsonify(items=ITEMS[:10], count=len(ITEMS), ok=True)


@app.route("/form", methods=["GET", "POST"])
def form():
    fields = request.form.to_dict() if request.method == "POST" else {}
    if request.method == "POST" and "name" not in fields:
        return "missing field: name", 400
    return render_template("form.html", fields=fields)
