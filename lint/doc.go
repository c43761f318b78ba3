// Package lint is the offline gate behind `walpost lint`: it parses
// application SQL (migrations, query files, PL/pgSQL function bodies and DO
// blocks) with PostgreSQL's own parser and reports the outbox anti-patterns
// that lose or double events before any forwarder runs. Rules are listed by
// Rules; their exact semantics, with a bad and a good example each, are
// documented in docs/lint.md at the repository root (TestManualExamples lints
// those examples).
//
// The parser is libpg_query compiled to WebAssembly and run by wazero
// (wasilibs/go-pgquery), so `CGO_ENABLED=0 go build` gives a static walpost.
// Parse trees are pganalyze/pg_query_go's generated types: with CGO_ENABLED=0
// that package is pure Go; with cgo enabled it also compiles and links
// pg_query_go's own C parser, which nothing calls.
//
// The unit of analysis is a file set: every file handed to one Lint call.
// Some rules look across the whole set (a UNIQUE index added in a later
// migration satisfies OBX001; a bound on attempts in the poller's query file
// satisfies OBX007), the others look at one file, one goose section or one
// function body at a time.
//
// Invariants:
//
//  1. A file the parser rejects is never skipped: it yields an Error with the
//     parser's message and position, and Result.ExitCode is 2.
//  2. Lint never panics on any input: a panic inside a rule becomes an Error
//     for that file set (FuzzLint checks the unrecovered path).
//  3. Output is deterministic: findings and errors are sorted by file, line,
//     column and rule, whatever the order of discovery.
//  4. Rule ids and names are stable; --disable accepts either.
//
// Positions are 1-based; columns count characters (runes), as PostgreSQL's
// own error cursor does.
package lint
