import { describe, expect, it } from "vitest";
import { nodeLabel } from "../../../src/routing/node-label";

describe("nodeLabel (how a node is stored on usage records)", () => {
	it("drops credentials, query and fragment, and keeps scheme, host, port and path", () => {
		expect(nodeLabel("http://user:pa55w0rd@10.0.0.5:8000/v1")).toBe("http://10.0.0.5:8000/v1");
		expect(nodeLabel("https://node.example/v1?api_key=secret#x")).toBe("https://node.example/v1");
		expect(nodeLabel("http://127.0.0.1:8788/n/node-1/v1")).toBe("http://127.0.0.1:8788/n/node-1/v1");
	});

	it("masks a key given as a path segment, as /admin/nodes shows it", () => {
		expect(nodeLabel("https://proxy.example/key/abc/v1?x=1")).toBe("https://proxy.example/key/***/v1");
	});

	it("keeps nothing secret-shaped of a value that is not a URL", () => {
		expect(nodeLabel("user:pw@host/v1?k=1")).toBe("host/v1");
	});
});
