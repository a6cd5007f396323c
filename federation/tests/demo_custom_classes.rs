//! The Rust example (federation/examples/custom_classes.rs) converges: its own classes, the
//! controller of comb, the demo's layers.
// It runs `comb demo`/`comb sandbox` or the demo's clusters: only with the emulator inside.
#![cfg(feature = "sandbox")]

#[allow(dead_code)]
#[path = "../examples/custom_classes.rs"]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_with_its_own_classes_converges() {
    example::run()
        .await
        .expect("every Comb of the example reaches Running");
}
