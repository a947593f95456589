"""The HTTP layer: Flask rules generated from the route table, middleware, error and SSE rendering.

Rule: this is the only package that imports Flask or werkzeug. It turns a Flask request into an
ApiRequest, calls the route's handler, and turns the ApiReply into a response.
"""

from app.http.connection import take_close_request
from app.http.cors import CorsPolicy
from app.http.flask_app import create_app
from app.http.static_site import StaticSite

__all__ = ["CorsPolicy", "StaticSite", "create_app", "take_close_request"]
