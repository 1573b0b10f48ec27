"""docs/differences.md is compat/known_differences.py, rendered: it names every key, in order,
and is exactly what compat/render_differences.py writes; the README links it."""
import os

from compat import render_differences
from compat.known_differences import DIFFERENCES


def readme():
    with open(render_differences.PAGE, encoding='utf-8') as f:
        return f.read()


def test_readme_section_is_rendered_from_the_list():
    text = readme()
    assert render_differences.replace_section(text, render_differences.render()) == text, (
        'docs/differences.md is out of date: run python -m compat.render_differences')
    assert render_differences.main(['--check']) == 0


def test_readme_section_names_every_key_in_order():
    section = readme().split(render_differences.BEGIN, 1)[1].split(render_differences.END)[0]
    positions = [section.index('**%s**' % d.key) for d in DIFFERENCES]
    assert positions == sorted(positions)


def test_check_reports_a_stale_section(tmp_path, capsys):
    stale = tmp_path / 'differences.md'
    stale.write_text(readme().replace('**fastcgi-get-values**', '**get-values**'))
    assert render_differences.main(['--check', str(stale)]) == 1
    assert 'out of date' in capsys.readouterr().err
    assert render_differences.main([str(stale)]) == 0
    assert stale.read_text() == readme()


def test_readme_links_the_page():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    assert '(docs/differences.md)' in text and render_differences.BEGIN not in text
