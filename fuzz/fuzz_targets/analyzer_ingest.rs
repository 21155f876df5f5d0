#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocemesh_fuzz::ingest::analyzer_ingest(data));
