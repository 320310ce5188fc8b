//! Compiles the wire contract without a system `protoc`: `protox` parses the
//! .proto files in pure Rust and `tonic-prost-build` generates the code.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/squadron/v1/worker.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
