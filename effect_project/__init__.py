"""The effect service: a second Django project, on its own database, that records side effects.

Serve it with ``python -m effect_project serve`` (see effect_project/effects/management/commands/
serve.py); every other ``python -m effect_project <command>`` is a Django management command.
"""
