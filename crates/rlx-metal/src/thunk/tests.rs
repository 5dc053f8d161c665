//! Tests over every thunk variant.
