//! The `lambdafusion` command line: embedded server, one-shot queries and a shell, a client for
//! a deployed (or emulated) endpoint, TPC-H data generation, the demo and the benchmark.
//! The library half holds what the tests share with the binary.

pub mod bench;
pub mod client;
pub mod console;
pub mod display;
pub mod error;
pub mod fanout;
pub mod model;
pub mod planning;
pub mod session;
pub mod shell;
pub mod tpch;
pub mod writebench;
