"""The report's statistics: fixed budgets and seed fates, the factorial fit, the end point's equivalence
tests and the gradient-at-initialization fit over depths. They compute numbers, never the report's words."""
