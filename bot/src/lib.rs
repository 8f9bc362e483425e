//! The Discord side of switchboard: the serenity gateway client and poise commands, the durable
//! session/message store, and [`DiscordSurface`], the Discord implementation of
//! `toolserver::Surface`.

#![warn(missing_docs)]

pub mod approvals;
pub mod commands;
pub mod gateway;
pub mod observe;
pub mod payload;
pub mod rest;
pub mod service;
pub mod store;
pub mod surface;
pub mod workflows;

pub use surface::DiscordSurface;
