//! `toolplane`: the command-line entry point.

fn main() {
    eprintln!("toolplane: use the library");
}
