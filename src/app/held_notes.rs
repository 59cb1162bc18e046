//! Notes said while a command's input is still being checked are held here and printed once the
//! input is known to be valid (`print_held`), so input that is refused gets its one-line error
//! alone, not notes about values it never used before it. `app::run` prints what is still held
//! when a command succeeds and drops it when the command fails.

use std::cell::RefCell;

thread_local! {
    static HELD: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Holds one whole stderr line (with its `note: ` prefix) until `print_held`; a line already
/// held is said once (`compare --plan A --plan B` resolves the scenario of each file, and a flag
/// that both share, such as `--max-memory-gib` past the GPU's memory, printed its note twice).
pub(super) fn hold(line: String) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if !held.contains(&line) {
            held.push(line);
        }
    });
}

/// Prints the held lines on stderr, in the order they were said.
pub(super) fn print_held() {
    for line in HELD.with(|held| std::mem::take(&mut *held.borrow_mut())) {
        eprintln!("{line}");
    }
}

/// Forgets the held lines: the command failed, and its error is the one line it prints.
pub(super) fn drop_held() {
    HELD.with(|held| held.borrow_mut().clear());
}
