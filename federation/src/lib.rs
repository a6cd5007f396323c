//! comb-federation: the Comb engine, bridges, layers, the federation controller and the CLI.

pub mod cli;
pub mod config;
pub mod controller;
pub mod engine;
pub mod error;
pub mod logging;
pub mod picture;
pub mod webhook;
