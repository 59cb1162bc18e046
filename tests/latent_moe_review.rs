//! Review of LatentMoE (Megatron-Core `--moe-latent-size`): each test pins a defect found in the
//! first version, and fails without its fix.

mod common;

use common::*;

/// The bundled Super's model file with its `latent_size` value replaced by `value`, under `dir`.
fn super_with_latent(dir: &std::path::Path, value: &str) -> String {
    let text =
        std::fs::read_to_string(format!("{ROOT}/models/nemotron-3-super-120b-a12b.yaml")).unwrap();
    let start = text.find("  latent_size:").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let text = format!("{}  latent_size: {value}{}", &text[..start], &text[end..])
        .replace("name: nemotron-3-super-120b-a12b", "name: super-edit");
    let path = dir.join("super-edit.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_model_file_latent_width_is_refused_in_the_files_words() {
    // `latent_size` is a model-file key: its refusals name the key (not the Megatron flag), and
    // never suggest 0, which the model check refuses in turn.
    let dir = scratch("latent-moe-review", "file-words");
    for (value, want, what) in [
        ("0", "moe.latent_size: 0 must be at least 1", "zero"),
        (
            "-1",
            "latent_size must be a positive whole number (1 or more)",
            "negative",
        ),
        (
            "abc",
            "latent_size takes a whole number of 1 or more",
            "text",
        ),
    ] {
        let path = super_with_latent(&dir, value);
        let r = run(&["eval", "--model", &path, "--nodes", "8", "--tp", "1"]);
        assert_one_line_error(
            &r,
            &[want],
            &["--moe-latent-size", "latent_size: 0)", "0 or more"],
            what,
        );
    }
}
