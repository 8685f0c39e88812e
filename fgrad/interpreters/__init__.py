"""One module per transformation: reverse (grad, vjp) and forward (jvp) mode."""
