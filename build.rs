//! Compiles the AG-UI binary transport's schema (`proto/agui_events.proto`) into a descriptor
//! set the gateway loads at start (`src/protocol/proto.rs`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/agui_events.proto");
    let descriptors = protox::compile(["agui_events.proto"], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("agui_events.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&descriptors))?;
    Ok(())
}
