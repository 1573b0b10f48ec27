"""The rows of each table of an HTML page, as lists of cell texts: what the status page's tests
read from its HTML, as rendered (tests/unit/test_status_page.py) and as a browser's DOM
(tests/integration/test_status_page.py)."""
from html.parser import HTMLParser


class Tables(HTMLParser):
    """``feed(page)``, then ``tables``: per table its rows, per row its cells' stripped text."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == 'table':
            self.tables.append([])
        elif tag == 'tr' and self.tables:
            self.tables[-1].append([])
        elif tag in ('th', 'td'):
            self.cell = ''

    def handle_endtag(self, tag):
        if tag in ('th', 'td') and self.cell is not None:
            self.tables[-1][-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
