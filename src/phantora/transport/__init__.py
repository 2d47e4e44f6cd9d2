"""The wire between rank processes and the coordinator: `RankClient` (rank side), `CoordinatorServer`
(launcher side), length-prefixed pickle frames over localhost TCP (`wire`). See docs/launcher.md."""
