import { Hono } from "hono";
import type { AppEnv } from "../app-env";

export const responsesRoutes = new Hono<AppEnv>();
