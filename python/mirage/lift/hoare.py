def prove_grid_loop(kernel, tr, args, constexprs, terms, outputs, timeout_ms):
    return []
