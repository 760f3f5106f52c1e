//! The safetensors format itself: byte-exact headers against golden files
//! and the reference writer, and every validity rule of the format summary.

mod golden;
mod validity_rules;
