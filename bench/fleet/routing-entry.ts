// What the fleet simulator routes with: the gateway's own modules, bundled as they ship.

export { homeNode, lineLimit, loadIsStale, prefixGroup, roomOn } from "../../src/batches/schedule";
export { pickRoute, powerOfTwo } from "../../src/routing/picker";
export { prefixAffinityKey } from "../../src/routing/prefix-affinity";
export { rendezvousPick } from "../../src/routing/rendezvous";
