//! `switchboard-sandbox-exec`: the first program inside the sandbox. It sets the resource
//! limits and Landlock on itself, then runs the command (see `switchboard_sandbox::helper`).

fn main() {
    std::process::exit(switchboard_sandbox::helper::exec_main(
        std::env::args_os().skip(1),
    ));
}
