"""Small generic building blocks shared by every model family."""
