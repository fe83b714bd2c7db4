"""Helpers shared by the dashboard's pages: model choice, schedule state, trace files and trace views.

Everything UI-free that a notebook could want lives in `skipcore.plots` instead.
"""
