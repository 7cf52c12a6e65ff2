"""The report's page: the renderer and its Jinja2 templates, the figures, the views that reshape tables
for the page, the paper's deviations in words and the README's results."""
