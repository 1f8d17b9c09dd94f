// Types for dev/otlp-logs.mjs: the gateway's JSON log lines as OTLP/HTTP log records.
export type AnyValue =
	| Record<string, never>
	| { boolValue: boolean }
	| { intValue: string }
	| { doubleValue: number }
	| { stringValue: string }
	| { arrayValue: { values: AnyValue[] } }
	| { kvlistValue: { values: { key: string; value: AnyValue }[] } };
export interface LogRecord {
	timeUnixNano: string;
	severityNumber: number;
	severityText: string;
	body: AnyValue;
	attributes: { key: string; value: AnyValue }[];
}
export interface ExportLogsServiceRequest {
	resourceLogs: {
		resource: { attributes: { key: string; value: AnyValue }[] };
		scopeLogs: { scope: { name: string }; logRecords: LogRecord[] }[];
	}[];
}
export function anyValue(v: unknown): AnyValue;
export function logRecord(line: Record<string, unknown>, timeMs?: number): LogRecord;
export function exportRequest(lines: Record<string, unknown>[], timeMs?: number): ExportLogsServiceRequest;
export function parseLine(text: string): Record<string, unknown> | null;
export function send(endpoint: string, lines: Record<string, unknown>[], headers?: Record<string, string>): Promise<void>;
