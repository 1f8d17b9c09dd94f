/**
 * The import rules of src/ (issue 24): no cycle, and imports run one way, from a higher layer
 * to a lower one. `npm run lint:imports` checks them; `npm run check` (CI) runs it.
 *
 * The layers, lowest first. A module may import its own layer and any layer below, never one
 * above. Each entry is a path pattern under src/.
 */
const LAYERS = [
	// Leaves: no I/O, imported by anyone.
	["errors", "ids", "redact", "secrets", "memo", "types", "money/", "estimate"],
	["alerts/rules", "config-batches", "config-node", "config-schema", "config", "observability/log-event"],
	// Platform: HTTP helpers, D1, Durable Object storage, Redis, the Hono context's types; alert
	// deliveries (signing, the outbox a Durable Object sends them from).
	["http/", "db/", "storage/", "redis/", "app-env", "alerts/"],
	// Shared steps, each below the ones that use it.
	["routing/"],
	["engine/"],
	["stream/"],
	["search/"],
	["ledger/"],
	["auth/"],
	["observability/"],
	// One settlement object per request: hold to settlement, for every lane (it writes the log line).
	["settlement/"],
	// Lanes: chat is the shared lane the others compose; no lane imports another but chat.
	["chat/"],
	["completions/", "embeddings/", "responses/", "messages/", "gemini/"],
	// The batch lane runs each line on its endpoint's lane (their runners), from a dispatcher per model.
	["batches/"],
	// The public API's shapes shared by the routes, the OpenAPI document and the jobs: input schemas, views.
	["api/"],
	// The OpenAPI document and the maintenance jobs, then the routes that serve them.
	["openapi/", "maintenance/"],
	["routes/"],
	["app", "index"],
];

const pattern = (entry) => (entry.endsWith("/") ? `^src/${entry}` : `^src/${entry}\\.ts$`);
const anyOf = (entries) => entries.map(pattern);

const upward = LAYERS.slice(0, -1).map((layer, i) => ({
	name: `layer-${i}-imports-up`,
	comment: `${layer.join(", ")} may not import from a higher layer (see LAYERS in .dependency-cruiser.cjs)`,
	severity: "error",
	from: { path: anyOf(layer), pathNot: anyOf(LAYERS.slice(0, i).flat()) },
	to: { path: anyOf(LAYERS.slice(i + 1).flat()), pathNot: anyOf(LAYERS.slice(0, i + 1).flat()) },
}));

const LANES = ["completions", "embeddings", "responses", "messages", "gemini"];
const crossLane = LANES.map((lane) => ({
	name: `lane-${lane}-imports-lane`,
	comment: `the ${lane} lane composes chat and the shared steps; it may not import another lane`,
	severity: "error",
	from: { path: `^src/${lane}/` },
	to: { path: LANES.filter((l) => l !== lane).map((l) => `^src/${l}/`) },
}));

module.exports = {
	forbidden: [
		{
			name: "no-circular",
			comment: "no import cycle, type-only imports included",
			severity: "error",
			from: { path: "^src/" },
			to: { circular: true },
		},
		{
			name: "no-unlayered",
			comment: "every src/ module belongs to a layer: add a new folder or file to LAYERS",
			severity: "error",
			from: { path: "^src/", pathNot: anyOf(LAYERS.flat()) },
			to: {},
		},
		{
			name: "no-unlayered-target",
			comment: "every src/ module belongs to a layer: add a new folder or file to LAYERS",
			severity: "error",
			from: { path: "^src/" },
			to: { path: "^src/", pathNot: anyOf(LAYERS.flat()) },
		},
		{
			name: "durable-ledger-imports-worker",
			comment: "the ledger Durable Object (src/ledger/durable/) knows nothing of the Worker side that calls it",
			severity: "error",
			from: { path: "^src/ledger/durable/" },
			to: { path: "^src/ledger/[^/]+$" },
		},
		...upward,
		...crossLane,
	],
	options: {
		doNotFollow: { path: "node_modules" },
		exclude: { path: "^src/console/" },
		tsPreCompilationDeps: true,
		tsConfig: { fileName: "tsconfig.json" },
		enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"] },
	},
};
