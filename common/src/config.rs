//! Where the binaries' settings come from: command-line flags first, then
//! environment variables (`SQUADRON_LISTEN` for `--listen`; workers use
//! `SQUADRON_WORKER_…`), then a TOML file given with `--config FILE` (or
//! the `…CONFIG` variable) whose keys are the long flag names:
//!
//! ```toml
//! listen = "0.0.0.0:50051"
//! max-concurrent-queries = 64
//! workers = ["https://w1:50061", "https://w2:50061"]
//! insecure = false
//! ```
//!
//! The file's values become the flags' defaults, so clap applies the
//! precedence and parses every value the same way wherever it came from.
//! An unknown key, or a value its flag does not accept, is an error naming
//! the key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{ArgAction, CommandFactory, FromArgMatches};

/// Parses the process's flags into `T` as described above; prints help or
/// errors and exits like `clap::Parser::parse`.
pub fn parse<T: CommandFactory + FromArgMatches>(env_prefix: &str) -> anyhow::Result<T> {
    parse_from(env_prefix, std::env::args_os().collect())
}

fn parse_from<T: CommandFactory + FromArgMatches>(
    env_prefix: &str,
    args: Vec<OsString>,
) -> anyhow::Result<T> {
    let mut command = with_env(T::command(), env_prefix);
    let config_var = format!("{env_prefix}CONFIG");
    let file = config_flag(&args).or_else(|| std::env::var_os(&config_var).map(PathBuf::from));
    if let Some(file) = file {
        for (id, values, is_flag) in read_config(&file, &T::command())? {
            let values: Vec<&'static str> = values.into_iter().map(leak).collect();
            command = command.mut_arg(id.as_str(), |arg| {
                if is_flag {
                    arg.default_value(values[0])
                } else {
                    arg.default_values(values)
                }
            });
        }
    }
    let matches = command.get_matches_from(args);
    T::from_arg_matches(&matches).map_err(|e| e.exit())
}

/// Every long flag (but `--help`, `--version`, `--config`) also read from
/// `{prefix}{NAME}`.
fn with_env(command: clap::Command, prefix: &str) -> clap::Command {
    command.mut_args(|arg| {
        let Some(long) = arg.get_long() else {
            return arg;
        };
        if matches!(long, "help" | "version" | "config") {
            return arg;
        }
        let name = format!("{prefix}{}", long.replace('-', "_").to_uppercase());
        arg.env(leak(name))
    })
}

/// The value of `--config FILE` / `--config=FILE` on the command line.
fn config_flag(args: &[OsString]) -> Option<PathBuf> {
    let mut args = args.iter().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(file) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(file));
        }
        if text == "--" {
            break;
        }
    }
    None
}

/// The file's settings: each flag's id, its values as flag text, and
/// whether it is a switch; every value checked by the flag's own parser.
fn read_config(
    file: &Path,
    command: &clap::Command,
) -> anyhow::Result<Vec<(String, Vec<String>, bool)>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", file.display()))?;
    let mut settings = vec![];
    for (key, value) in table {
        let where_ = format!("{}: key `{key}`", file.display());
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config")
        else {
            bail!("{where_} is not a setting (keys are the long flag names: see docs/configuration.md)");
        };
        let is_flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
        let values = match (&value, is_flag) {
            (toml::Value::Boolean(b), true) => vec![b.to_string()],
            (_, true) => bail!("{where_} takes true or false"),
            (toml::Value::Array(items), false) => items
                .iter()
                .map(|item| scalar(item).with_context(|| where_.clone()))
                .collect::<anyhow::Result<_>>()?,
            (item, false) => vec![scalar(item).with_context(|| where_.clone())?],
        };
        if !is_flag {
            let mut argv = vec![command.get_name().to_string()];
            for value in &values {
                argv.push(format!("--{key}={value}"));
            }
            if let Err(e) = command.clone().try_get_matches_from(argv) {
                let message = e.to_string();
                let first = message.lines().next().unwrap_or_default();
                bail!("{where_}: {}", first.trim_start_matches("error: "));
            }
        }
        settings.push((arg.get_id().to_string(), values, is_flag));
    }
    Ok(settings)
}

fn scalar(value: &toml::Value) -> anyhow::Result<String> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail!("takes a string or a number, not {}", other.type_str()),
    })
}

/// clap keeps defaults and environment names for the life of the process;
/// these are made once at start-up.
fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "t")]
    struct Args {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value = "127.0.0.1:1")]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 32)]
        max_queries: usize,
        #[arg(long, value_delimiter = ',')]
        workers: Vec<String>,
        #[arg(long)]
        insecure: bool,
    }

    fn config(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, text).unwrap();
        (dir, file.to_str().unwrap().to_string())
    }

    fn parse(args: &[&str]) -> anyhow::Result<Args> {
        parse_from(
            "SQUADRON_CONFIG_TEST_",
            args.iter().map(OsString::from).collect(),
        )
    }

    /// With a prefix of its own: tests run in parallel, in one environment.
    fn parse_env(args: &[&str]) -> anyhow::Result<Args> {
        parse_from(
            "SQUADRON_ENV_TEST_",
            args.iter().map(OsString::from).collect(),
        )
    }

    #[test]
    fn the_file_sets_defaults_and_flags_override_it() {
        let (_dir, file) = config(
            "listen = \"0.0.0.0:9\"\nmax-queries = 5\nworkers = [\"a:1\", \"b:2\"]\ninsecure = true\n",
        );
        let args = parse(&["t", "--config", &file]).unwrap();
        assert_eq!(args.listen.port(), 9);
        assert_eq!(args.max_queries, 5);
        assert_eq!(args.workers, vec!["a:1", "b:2"]);
        assert!(args.insecure);
        let args = parse(&["t", "--config", &file, "--max-queries", "7"]).unwrap();
        assert_eq!(args.max_queries, 7);
        let args = parse(&["t"]).unwrap();
        assert_eq!(args.max_queries, 32);
    }

    #[test]
    fn the_environment_sits_between_flags_and_the_file() {
        let (_dir, file) = config("max-queries = 5\n");
        std::env::set_var("SQUADRON_ENV_TEST_MAX_QUERIES", "6");
        let from_env = parse_env(&["t", "--config", &file]).unwrap();
        let from_flag = parse_env(&["t", "--config", &file, "--max-queries=8"]).unwrap();
        std::env::remove_var("SQUADRON_ENV_TEST_MAX_QUERIES");
        assert_eq!(from_env.max_queries, 6);
        assert_eq!(from_flag.max_queries, 8);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        for (text, named) in [
            ("max-querys = 5\n", "`max-querys` is not a setting"),
            ("max-queries = \"many\"\n", "`max-queries`"),
            ("listen = 7\n", "`listen`"),
            ("insecure = \"yes\"\n", "`insecure` takes true or false"),
            ("workers = [[1]]\n", "`workers`"),
        ] {
            let (_dir, file) = config(text);
            let err = format!("{:#}", parse(&["t", "--config", &file]).unwrap_err());
            assert!(err.contains(named), "{text}: {err}");
        }
        let (_dir, file) = config("not toml [");
        let err = format!("{:#}", parse(&["t", "--config", &file]).unwrap_err());
        assert!(err.contains("not valid TOML"), "{err}");
    }
}
