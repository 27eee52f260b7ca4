"""Strategy search and planning: enumerate parallel layouts, evaluate them with the cost model, rank them."""
