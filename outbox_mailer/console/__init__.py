"""``outbox-mailer console``: the operator console, server-rendered pages on the webhook receiver's stack
(Starlette on uvicorn, Jinja2 templates, every asset served from ``static/``; no JavaScript needed
except for live refresh).

* ``app.py``      the application: routes, security headers, who is asking, error pages
* ``auth.py``     passwords, sessions, CSRF tokens, the login throttle, the trusted proxy
* ``filters.py``  the email list's query parameters
* ``pages.py``    what the pages read (GET)
* ``actions.py``  what operators change (POST), through the CLI's own store methods
* ``content.py``  an email's content: composed headers, the sandboxed HTML preview
* ``charts.py``   the overview's bar charts as SVG geometry
"""
