//! agui-bench: the gateway's load tool (see BENCHMARKS.md).
fn main() {}
